#!/bin/sh
# docs/testplan.md#seeded-bugs: the checkers must bite. Builds each seeded bug
# (a build tag, see the bug_*_on.go files) and runs each test that must catch
# it (a tag may have several rows), once per seed, then prints the catch
# table: tag, package, test, caught/seeds. A bug counts as caught when its
# test reports a failure (--- FAIL); a build error or a test timeout is
# reported apart, never as a catch.
#
#   SEEDS=5          seeds per bug (seed i is SEED_BASE+i)
#   SEED_BASE=...    default: a random base, printed
#   BUGS="bug_x ..." only these tags
#   SEEDED_FLAGS     go test flags (default: -race -count=1 -timeout 15m)
#   SEEDED_DIR       where each run's output is kept (default: a temp dir)
#   GO               the go command
set -u
GO=${GO:-go}
SEEDS=${SEEDS:-5}
SEED_BASE=${SEED_BASE:-$(( $(date +%s) % 100000 * 10 ))}
FLAGS=${SEEDED_FLAGS:--race -count=1 -timeout 15m}
DIR=${SEEDED_DIR:-$(mktemp -d "${TMPDIR:-/tmp}/lockcell-seeded-bugs.XXXXXX")}
mkdir -p "$DIR"

# tag package test-regex: a row per test that must catch the bug (the
# end-to-end test, and fsm's model test for the state machine's own
# bugs, which it must catch on its own)
CASES='bug_nofence ./fixtures/safety ^TestMutualExclusionFencing$
bug_nolockdelay ./fixtures/safety ^TestLockDelay$
bug_nosync ./fixtures/safety ^(TestStoreSyncsBeforeReturn|TestWALSyncsBeforeReturn|TestDurability)$
bug_nodedup ./fixtures/safety ^TestAtMostOnceRetries$
bug_nolockdelay ./fsm ^TestFSMMatchesModel$
bug_nodedup ./fsm ^TestFSMMatchesModel$
bug_readnoverify ./fixtures/chaos ^TestStaleReadProbe$
bug_noinval ./fixtures/chaos ^TestCacheNeverStale$
bug_noinval ./cmd/lockcell ^TestSelfcheckBinary$
bug_aclskipsubop ./cell ^TestACLMatrix$'

echo "seeded bugs: $SEEDS seeds from $((SEED_BASE + 1)); logs in $DIR"
TABLE="$DIR/table.txt"
: > "$TABLE"
status=0
echo "$CASES" | while read -r tag pkg run; do
	if [ -n "${BUGS:-}" ] && ! echo " $BUGS " | grep -q " $tag "; then
		continue
	fi
	caught=0 missed=0 errors=0
	start=$(date +%s)
	i=1
	while [ "$i" -le "$SEEDS" ]; do
		seed=$((SEED_BASE + i))
		log="$DIR/$tag-$(echo "$pkg$run" | tr -c 'A-Za-z0-9' _)-$seed.log"
		LOCKCELL_SAFETY_SEED=$seed LOCKCELL_CHAOS_SEED=$seed \
			$GO test $FLAGS -tags "faultpoints,$tag" -run "$run" -v "$pkg" > "$log" 2>&1
		if grep -q 'panic: test timed out\|\[build failed\]\|\[setup failed\]' "$log"; then
			errors=$((errors + 1)); verdict=error
		elif grep -q -- '--- FAIL' "$log"; then
			caught=$((caught + 1)); verdict=caught
		elif grep -q '^ok\|^PASS' "$log"; then
			missed=$((missed + 1)); verdict=MISSED
		else
			errors=$((errors + 1)); verdict=error
		fi
		echo "  $tag seed $seed: $verdict ($log)"
		i=$((i + 1))
	done
	secs=$(( $(date +%s) - start ))
	printf '%-17s %-19s %-55s %d/%d  (missed %d, errors %d, %ds)\n' "$tag" "$pkg" "$run" "$caught" "$SEEDS" "$missed" "$errors" "$secs" >> "$TABLE"
done
echo
printf '%-17s %-19s %-55s %s\n' "TAG" "PACKAGE" "TEST" "CAUGHT"
cat "$TABLE"
# The suite passes when every bug is caught in at least 4 of 5 seeds.
need=$(( (SEEDS * 4 + 4) / 5 ))
awk -v need="$need" '{ split($4, a, "/"); if (a[1] + 0 < need) bad = 1 } END { exit bad }' "$TABLE" || status=1
if [ "$status" -ne 0 ]; then
	echo "seeded-bugs: some bug was caught in fewer than $need of $SEEDS seeds"
fi
exit $status
