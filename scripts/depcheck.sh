#!/bin/sh
# Enforces the one-way package rule of DESIGN.md over `go list` output
# ("pkg: imports...") on stdin. Exits 1 naming every violation.
awk '
function bad(msg) { print "depcheck: " msg; failed = 1 }
{
  pkg = $1; sub(/:$/, "", pkg)
  hasMaster = 0; hasReplica = 0
  for (i = 2; i <= NF; i++) {
    imp = $i
    if (imp !~ /^lockcell(\/|$)/) {
      if (pkg ~ /^lockcell\/(client|cache|sequencer|acl|cell\/wire|backupfile)$/ && imp ~ /dgraph-io\/badger|hashicorp\/raft/)
        bad(pkg " must not import " imp)
      continue
    }
    if (imp == "lockcell/master") hasMaster = 1
    if (imp == "lockcell/replica") hasReplica = 1
    # Test helpers live under fixtures/ and may build on each other.
    if (imp == "lockcell/fixtures" && pkg !~ /^lockcell\/fixtures\//) bad(pkg " (non-test) imports lockcell/fixtures")
    # cell/wire/bound is a shared leaf: the msgpack bounds check; so is
    # backupfile: the backup file layout, read by replica and client.
    if (imp == "lockcell/cell/wire/bound" || imp == "lockcell/backupfile") continue
    # acl is pure logic: the state machine decides permissions with it.
    if (pkg == "lockcell/replica" && imp == "lockcell/acl") continue
    if (pkg ~ /^lockcell\/(cell\/wire|cell\/wire\/bound|backupfile|acl|sequencer|cache|replica)$/) bad(pkg " is a leaf but imports " imp)
    if (pkg ~ /^lockcell\/(client|cache|sequencer)$/ && imp ~ /^lockcell\/(master|replica|cell|acl)$/) bad(pkg " must not import " imp)
    if (pkg == "lockcell/master" && imp ~ /^lockcell\/(cell|client|fixtures)$/) bad(pkg " must not import " imp)
    if (pkg == "lockcell/cmd/lockcell" && imp ~ /^lockcell\/(master|replica|cell)$/) bad(pkg " (the CLI) must not import " imp)
  }
  if (hasMaster && hasReplica && pkg !~ /^lockcell\/(cell|fixtures)$/) bad(pkg " imports both master and replica; only cell and fixtures may")
}
END { if (failed) exit 1; print "depcheck: ok" }'
