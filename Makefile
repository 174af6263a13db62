# lockcell: a Chubby-style lock service.
#   make run    five-replica dev cell on loopback (ports 7001-7005, data ./lockcell-data)
#   make test   the test suite (race detector on), as CI runs it
#   make certs  a development CA and certificates for mutual TLS (./lockcell-certs)
GO       ?= go
BIN      := bin
PKGS     := ./...
DATA     ?= ./lockcell-data
CERTS    ?= ./lockcell-certs
TESTFLAGS ?= -race -count=1 -timeout 14m
# Tests run with the fault points compiled in (crash points and the disk
# stall, replica/faultpoints_on.go), and so do the lockcelld processes
# they build; release builds (make build, the image) have none.
TESTTAGS  ?= faultpoints

.PHONY: all build run certs test bench bench-cell bench-geo race vet depcheck fmt clean
.PHONY: torture
.PHONY: fuzz-short netns-deps browser-deps postgres-deps prometheus-deps

all: build

# -buildvcs=auto stamps the commit into --version wherever the checkout
# has its git metadata, even when GOFLAGS turns stamping off.
build:
	$(GO) build -buildvcs=auto -o $(BIN)/lockcelld ./cmd/lockcelld
	$(GO) build -buildvcs=auto -o $(BIN)/lockcell ./cmd/lockcell

run: build
	$(BIN)/lockcelld dev --data $(DATA)

# Certificates for a cell with mutual TLS: ca.crt/ca.key, replica-1..5 and
# admin, plus USERS (make certs USERS=alice,bob). Existing files are kept.
certs: build
	$(BIN)/lockcelld certs --dir $(CERTS) $(if $(USERS),--users $(USERS))

# The CI test command: vet, the package dependency rule, then every test
# under the race detector, the three longest packages first so that the
# two test slots of a 2-core machine end together. The hostile-client
# campaign runs last and alone:
# it compares a victim's rate and latency under attack with its rate alone,
# which other packages' tests running beside it would blur.
test: vet depcheck fuzz-short netns-deps browser-deps postgres-deps prometheus-deps
	$(GO) test $(TESTFLAGS) -tags '$(TESTTAGS)' ./cell/ ./fixtures/chaos/ ./fixtures/safety/ \
	  $$($(GO) list $(PKGS) | grep -v -e '/fixtures/hostile$$' -e '/cell$$' -e '/fixtures/chaos$$' -e '/fixtures/safety$$')
	$(GO) test $(TESTFLAGS) -tags '$(TESTTAGS)' ./fixtures/hostile/

# The network-namespace tests of fixtures/chaos: TestNetns (partitions as
# nftables drops in a private namespace) needs the nft command;
# TestNetnsDelay (the operator's tools on a loopback with delay) needs tc
# (iproute2) for netem, or iptables for a netfilter queue where the kernel
# has no netem. As root with apt-get (these machines, CI) each missing one
# is installed here; elsewhere the tests say why they skip.
netns-deps:
	@for dep in nft:nftables tc:iproute2 iptables:iptables; do \
	  cmd=$${dep%%:*}; pkg=$${dep#*:}; \
	  command -v $$cmd >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	    { echo "make: installing $$pkg (apt-get) for the network-namespace tests"; \
	      apt-get install -y -qq $$pkg >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq $$pkg >/dev/null; }; }; } || \
	    echo "make: $$cmd unavailable: the network-namespace tests that need it will skip"; \
	done

# The status page test (cell TestStatusPageInBrowser) renders the page in
# headless Chromium and checks a screenshot. As root with apt-get it is
# installed here; elsewhere the test says why it skips (the page is still
# tested by scraping its HTML).
browser-deps:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { echo "make: installing chromium (apt-get) for TestStatusPageInBrowser"; \
	    apt-get install -y -qq chromium >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq chromium >/dev/null; }; }; } || \
	  echo "make: chromium unavailable: TestStatusPageInBrowser will skip"

# The conditional-write test (sequencer/httpfence TestPostgresConditionalWrite,
# docs/fencing.md) starts a private PostgreSQL server. As root with apt-get
# it is installed here; elsewhere the test says why it skips.
postgres-deps:
	@{ command -v initdb >/dev/null 2>&1 || ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; } || \
	  { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { echo "make: installing postgresql (apt-get) for TestPostgresConditionalWrite"; \
	    apt-get install -y -qq postgresql >/dev/null 2>&1 || { apt-get update -qq >/dev/null && apt-get install -y -qq postgresql >/dev/null; }; }; } || \
	  echo "make: PostgreSQL unavailable: TestPostgresConditionalWrite will skip"

# The alert rules test (deploy TestAlertRulesPromtool) runs promtool, from
# Debian's prometheus package. As root with apt-get it is installed here;
# elsewhere the test says why it skips. The package would start a
# Prometheus server and enable it at boot: a policy-rc.d (kept if one
# exists) stops the start, and the service is disabled afterwards, so
# nothing is left running or set to run.
prometheus-deps:
	@command -v promtool >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 && \
	  { echo "make: installing prometheus (apt-get, for promtool) for TestAlertRulesPromtool"; \
	    pol=/usr/sbin/policy-rc.d; own=; [ -e $$pol ] || { printf '#!/bin/sh\nexit 101\n' > $$pol && chmod 755 $$pol && own=1; }; \
	    { apt-get install -y -qq --no-install-recommends prometheus >/dev/null 2>&1 || \
	      { apt-get update -qq >/dev/null && apt-get install -y -qq --no-install-recommends prometheus >/dev/null; }; }; st=$$?; \
	    [ -z "$$own" ] || rm -f $$pol; \
	    if [ -d /run/systemd/system ]; then systemctl disable --now prometheus.service >/dev/null 2>&1; \
	    else deb-systemd-helper disable prometheus.service >/dev/null 2>&1; update-rc.d prometheus disable >/dev/null 2>&1; \
	      [ ! -x /etc/init.d/prometheus ] || /etc/init.d/prometheus stop >/dev/null 2>&1; fi; \
	    [ $$st -eq 0 ] && command -v promtool >/dev/null 2>&1; }; } || \
	  echo "make: promtool unavailable: TestAlertRulesPromtool will skip"

# Short fuzzing (docs/testplan.md#fuzzing): each target for FUZZTIME, one
# target per run (as -fuzz requires), from one fuzz-instrumented test binary
# per package; plain `go test` replays the committed corpora (testdata/fuzz/)
# anyway. New interesting inputs stay in the go build cache; a failing input
# is written to the package's testdata and fails. Go 1.26's fuzz coordinator
# can end a clean run with a bare "context deadline exceeded"
# (golang/go#75804, fixed in Go 1.27): with no failing input written, that is
# reported and ignored. A target may name its own time (Fn@10s): the FSM
# targets' executions are slow (their test binary instruments raft and badger
# too), so they get more.
FUZZTIME     ?= 4s
FUZZ_TARGETS := wire:FuzzFrame,FuzzDecodeRequest,FuzzRoundTrip,FuzzPath \
	fsm:FuzzDecodeRaftEntry@10s,FuzzSnapshotRestore@10s sequencer:FuzzSequencer acl:FuzzACLFile
fuzz-short:
	@tmp=$$(mktemp -d); trap 'rm -rf $$tmp' EXIT; cache=$$($(GO) env GOCACHE)/fuzz/lockcell; \
	for t in $(FUZZ_TARGETS); do \
	  pkg=$${t%%:*}; bin=$$tmp/$$(echo $$pkg | tr / _).test; \
	  $(GO) test -c -fuzz . -o $$bin ./$$pkg || exit 1; \
	  for ft in $$(echo $${t##*:} | tr , ' '); do \
	    fn=$${ft%@*}; ftime=$(FUZZTIME); case $$ft in *@*) ftime=$${ft#*@};; esac; \
	    out=$$(cd $$pkg && $$bin -test.run '^$$' -test.fuzz "^$$fn\$$" -test.fuzztime $$ftime \
	      -test.fuzzminimizetime 2s -test.parallel 2 -test.fuzzcachedir $$cache/$$pkg 2>&1); st=$$?; \
	    execs=$$(echo "$$out" | grep -o 'execs: [0-9]*' | tail -1); \
	    if echo "$$out" | grep -q 'no fuzz tests to fuzz'; then echo "fuzz FAIL $$pkg $$fn: no such fuzz target"; exit 1; fi; \
	    if [ $$st -eq 0 ]; then echo "fuzz ok   $$pkg $$fn ($$execs)"; \
	    elif echo "$$out" | grep -q 'context deadline exceeded' && ! echo "$$out" | grep -q 'Failing input written'; then \
	      echo "fuzz ok   $$pkg $$fn ($$execs; go#75804 deadline race ignored)"; \
	    else echo "$$out"; echo "fuzz FAIL $$pkg $$fn"; exit 1; fi; \
	  done; \
	done

race:
	$(GO) test -race -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s $(PKGS)

# Measures a running cell from outside, as an application sees it: one
# `lockcell bench` run of every workload (docs/performance.md, "Measure
# your own cell"), against the dev cell by default, so `make run` must be
# up in another terminal. BENCHFLAGS passes options on to every run
# (BENCHFLAGS='--json --clients 32 --duration 30s', or --replicas and
# --cell for another cell).
BENCHFLAGS ?=
bench-cell: build
	@for w in lock-uncontended lock-contended 'read --variant linearizable' 'read --variant cached' 'read --variant follower' write; do \
	  $(BIN)/lockcell bench $$w $(BENCHFLAGS) || exit 1; \
	done

# What distance between regions costs (docs/operations.md, "Geography"):
# real lockcelld processes in a private network namespace split into three
# regions with a one-way delay per pair (fixtures/chaos TestGeography), a
# cell spread 2+2+1 over them and a cell in one region, each measured from
# clients in every region. As root; a measurement, not part of make test.
# The global mirror's lag from a cell in one region to a cell in another
# too. LOCKCELL_GEO_SPREADS (default 20ms,50ms,100ms; ab/ac/bc gives each
# pair its own), LOCKCELL_GEO_LAYOUTS (default spread,regional,mirror),
# LOCKCELL_GEO_WINDOW, LOCKCELL_GEO_KILLS, LOCKCELL_GEO_CLIENTS,
# LOCKCELL_GEO_RAFT (scaled or default) and LOCKCELL_GEO_OUT (a file for
# the table) tune it.
bench-geo: netns-deps
	LOCKCELL_GEO=1 $(GO) test -count=1 -tags '$(TESTTAGS)' -run '^TestGeography$$' -v -timeout 60m ./fixtures/chaos/

# The package dependency rule of DESIGN.md, on each package's transitive
# dependencies (go list's .Deps).
depcheck:
	@GO=$(GO) sh scripts/depcheck.sh $(PKGS)

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)

# The full campaign (docs/testplan.md#tiers), in five steps that all run even if
# one fails; the target fails if any did:
#  1. the chaos tests (fixtures/chaos, the same as in `make test`) with long
#     durations, a progress line per fault and per ~30 s;
#  2. the safety tests (fixtures/safety: mutual exclusion, lock-delay, the
#     frozen master, durability, at-most-once retries) with
#     their long torture defaults (about 10-15 min in all);
#  3. the hostile-client campaign (fixtures/hostile) with a minute per
#     attack class and a directory of 100,000 children (about 25 min),
#     its own table (hostile-summary.txt) and a row per class (the
#     memory class runs here only: in make test, cell's one-replica memory
#     attack stands for it);
#  then a summary table with a row per chaos, safety and hostile test (ops,
#  faults, unknown outcomes, violations, key figure);
#  4. the seeded-bug suite (scripts/seeded-bugs.sh, SEEDS seeds, default 5),
#     which prints its own catch table;
#  5. replica's model test of the state machine with 10,000 random
#     sequences (300 in make test; about 2 min).
# Reports of failed chaos runs stay under TORTURE_DIR. Knobs:
# LOCKCELL_CHAOS_SEED, LOCKCELL_CHAOS_DURATION (fault phase, default 300s),
# LOCKCELL_CHAOS_PROBES (stale-read probes, default 200),
# LOCKCELL_CHAOS_KEEP=1, TORTURE_RUN; LOCKCELL_CHAOS_NETNS=1 runs step 1
# in a private network namespace with partitions as nftables drops (root,
# nft: make netns-deps); LOCKCELL_SAFETY_SEED,
# LOCKCELL_SAFETY_DURATION for the safety tests; LOCKCELL_HOSTILE_DURATION
# (each attack window, default 60s), LOCKCELL_HOSTILE_NODES for step 3;
# SEEDS, BUGS for step 4. LOCKCELL_VIA_PROXY=1 runs steps 1 and 2 with the
# clients under test behind lockcell proxies (docs/fault-campaign.md).
TORTURE_RUN   ?= ^Test(LinearizableFiles|StaleReadProbe|CacheNeverStale)$$
TORTUREFLAGS  ?= -count=1 -timeout 100m
torture:
	@dir=$${TORTURE_DIR:-$${TMPDIR:-/tmp}/lockcell-torture-$$(date +%Y%m%d-%H%M%S)}; mkdir -p $$dir; \
	echo "torture: reports and summary in $$dir"; \
	echo "torture: 1/5 chaos tests"; \
	LOCKCELL_CHAOS_TORTURE=1 LOCKCELL_CHAOS_ROOT=$$dir $(GO) test $(TORTUREFLAGS) -tags '$(TESTTAGS)' -v -run '$(TORTURE_RUN)' ./fixtures/chaos/; st=$$?; \
	echo "torture: 2/5 safety tests"; \
	LOCKCELL_CHAOS_TORTURE=1 LOCKCELL_CHAOS_ROOT=$$dir $(GO) test -count=1 -timeout 60m -tags '$(TESTTAGS)' -v ./fixtures/safety/; sf=$$?; \
	echo "torture: 3/5 hostile clients"; \
	LOCKCELL_CHAOS_TORTURE=1 LOCKCELL_CHAOS_ROOT=$$dir $(GO) test -count=1 -timeout 60m -tags '$(TESTTAGS)' -v ./fixtures/hostile/; ho=$$?; \
	$(GO) run ./fixtures/chaos/cmd/summary $$dir; sum=$$?; \
	echo "torture: 4/5 seeded bugs (SEEDS=$${SEEDS:-5})"; \
	GO=$(GO) sh scripts/seeded-bugs.sh; sb=$$?; \
	echo "torture: 5/5 state machine model (10,000 sequences)"; \
	LOCKCELL_CHAOS_TORTURE=1 $(GO) test -count=1 -timeout 60m -v -run '^TestFSMMatchesModel$$' ./fsm/; mo=$$?; \
	echo "torture: chaos exit $$st, safety exit $$sf, hostile exit $$ho, summary exit $$sum, seeded bugs exit $$sb, model exit $$mo"; \
	test $$st -eq 0 -a $$sf -eq 0 -a $$ho -eq 0 -a $$sum -eq 0 -a $$sb -eq 0 -a $$mo -eq 0

# docs/testplan.md#seeded-bugs: each seeded bug (build tag) against the test
# that must catch it, for SEEDS seeds (default 5; seed i is SEED_BASE+i,
# passed as LOCKCELL_SAFETY_SEED and LOCKCELL_CHAOS_SEED); prints the catch
# table (tag, test, caught/SEEDS) and fails if a bug is caught in fewer than 4
# of 5. BUGS="bug_x ..." runs a subset. See scripts/seeded-bugs.sh.
.PHONY: seeded-bugs
seeded-bugs:
	@GO=$(GO) sh scripts/seeded-bugs.sh
