#!/bin/sh
# Enforces the one-way package rule of DESIGN.md ("Packages and the
# dependency rule") on every package's transitive dependencies: what
# `go list -deps` would list for it (its .Deps), not only what it imports
# itself, so a package cannot reach a forbidden one through a third.
# Test files are not checked: tests may import anything (fixtures is for
# them). Exits 1 naming every violation and the import it comes through.
#
#   sh scripts/depcheck.sh [packages]   (default ./...; GO names the go command)
set -u
GO=${GO:-go}
[ $# -gt 0 ] || set -- ./...
list=$(mktemp "${TMPDIR:-/tmp}/depcheck.XXXXXX") || exit 1
trap 'rm -f "$list"' EXIT
# One line a package: path|direct imports|transitive dependencies.
"$GO" list -f '{{.ImportPath}}|{{join .Imports " "}}|{{join .Deps " "}}' "$@" >"$list" || exit 1

awk -F'|' '
# The rules, first match wins. A pattern names a package tree: "wire"
# is lockcell/wire and every package below it; "=sequencer" is that
# one package. Each package may depend on its own tree and on the trees
# after the colon ("*": any lockcell package; "-": none), and on nothing
# else of lockcell. A package no rule matches is itself an error: a new
# package gets its place here and in DESIGN.md.
BEGIN {
  n = split("" \
    "fixtures: *\n" \
    "deploy: -\n" \
    "cmd/lockcelld: cell wire codec frame master replica fsm backupfile acl audit =sequencer cache client mirror buildinfo internal/testhook internal/fdlimit proxy\n" \
    "=cmd/lockcell: client cache wire codec frame cell/certs backupfile acl =sequencer buildinfo selfcheck bench internal/testhook\n" \
    "cmd/lockcell-kv: client cache wire codec frame cell/certs acl backupfile sequencer internal/testhook\n" \
    "codec: -\n" \
    "frame: -\n" \
    "wire: codec\n" \
    "cell/certs: acl\n" \
    "cell/clientport: wire codec frame cell/certs acl internal/fdlimit\n" \
    "proxy: wire codec frame cell/certs cell/clientport acl internal/fdlimit\n" \
    "cell: wire codec frame master replica fsm backupfile acl audit =sequencer buildinfo internal/fdlimit\n" \
    "master: wire codec fsm backupfile acl audit =sequencer\n" \
    "replica: fsm codec backupfile acl audit\n" \
    "fsm: codec backupfile acl audit\n" \
    "client/admin: client wire codec frame cell/certs acl backupfile cache =sequencer internal/testhook\n" \
    "=client: client/internal internal/testhook wire codec frame cell/certs acl backupfile cache =sequencer\n" \
    "client: wire codec frame cell/certs acl backupfile cache =sequencer internal/testhook\n" \
    "client/recipe: client client/internal wire codec frame cell/certs acl backupfile cache =sequencer internal/testhook\n" \
    "internal/testhook: -\n" \
    "internal/fdlimit: -\n" \
    "sequencer/kv: =sequencer client wire codec frame cell/certs acl backupfile cache internal/testhook\n" \
    "sequencer/httpfence: =sequencer client wire codec frame cell/certs acl backupfile cache internal/testhook\n" \
    "selfcheck/filemodel: -\n" \
    "selfcheck: client wire codec frame cell/certs acl backupfile cache =sequencer internal/testhook\n" \
    "mirror: client wire codec frame cell/certs acl backupfile cache =sequencer internal/testhook\n" \
    "bench: client wire codec frame cell/certs acl backupfile cache =sequencer internal/testhook\n" \
    "examples: client wire codec frame cell/certs acl backupfile cache sequencer internal/testhook\n" \
    "sequencer: -\n" \
    "backupfile: codec\n" \
    "cache: -\n" \
    "acl: -\n" \
    "audit: -\n" \
    "buildinfo: -", rule, "\n")
  for (i = 1; i <= n; i++) {
    split(rule[i], kv, ": ")
    pat[i] = kv[1]; allow[i] = kv[2]
  }
  # Packages that must keep to a public API: besides the transitive rule,
  # their own imports of lockcell packages are only these. The election
  # recipe and the example programs are built on the public API of client,
  # so they never name the wire.
  nd = split("" \
    "client/recipe: =client =sequencer\n" \
    "mirror: =client\n" \
    "examples: =client client/recipe client/admin =sequencer sequencer/httpfence", drule, "\n")
  for (i = 1; i <= nd; i++) {
    split(drule[i], kv, ": ")
    dpat[i] = kv[1]; dallow[i] = kv[2]
  }
  # Packages that serve clients or resource servers never carry the
  # server side third-party stores with them, and neither do the state
  # machine and the master: Raft and badger belong to the node (replica).
  nostore = "cell/clientport proxy fsm master client cache sequencer acl audit backupfile wire codec frame =cmd/lockcell cmd/lockcell-kv selfcheck bench mirror examples"
  store = "github.com/dgraph-io/badger github.com/hashicorp/raft"
}
function bad(msg) { print "depcheck: " msg; failed = 1 }
# under(p, pattern): p is the pattern'\''s package or, unless the pattern is
# exact, below it.
function under(p, q,   exact) {
  exact = substr(q, 1, 1) == "="
  if (exact) q = substr(q, 2)
  q = (q ~ /\./) ? q : "lockcell/" q
  return p == q || (!exact && index(p, q "/") == 1)
}
function inAny(p, list,   k, m, a) {
  m = split(list, a, " ")
  for (k = 1; k <= m; k++) if (under(p, a[k])) return 1
  return 0
}
function mine(p) { return p == "lockcell" || index(p, "lockcell/") == 1 }
# via(pkg, dep): the direct import of pkg that dep comes through.
function via(pkg, dep,   k, m, a) {
  m = split(imports[pkg], a, " ")
  for (k = 1; k <= m; k++)
    if (a[k] == dep || index(" " deps[a[k]] " ", " " dep " ")) return a[k]
  return "?"
}
{ order[++np] = $1; imports[$1] = $2; deps[$1] = $3 }
END {
  for (j = 1; j <= np; j++) {
    pkg = order[j]
    r = 0
    for (i = 1; i <= n && !r; i++) if (under(pkg, pat[i])) r = i
    if (!r) { bad(pkg " has no rule in scripts/depcheck.sh (give it its place there and in DESIGN.md)"); continue }
    m = split(deps[pkg], d, " ")
    for (k = 1; k <= m; k++) {
      dep = d[k]
      if (mine(dep)) {
        if (allow[r] == "*" || under(dep, pat[r]) || (allow[r] != "-" && inAny(dep, allow[r]))) continue
        v = via(pkg, dep)
        bad(pkg " must not depend on " dep (v == dep ? "" : " (through " v ")"))
      } else if (inAny(pkg, nostore) && inAny(dep, store)) {
        # One line a module, not one a package of it.
        split(dep, mod, "/"); key = pkg " " mod[1] "/" mod[2] "/" mod[3]
        if (!(key in said)) { said[key] = 1; bad(pkg " must not depend on " dep " (through " via(pkg, dep) ")") }
      }
    }
    for (i = 1; i <= nd; i++) {
      if (!under(pkg, dpat[i])) continue
      m = split(imports[pkg], d, " ")
      for (k = 1; k <= m; k++)
        if (mine(d[k]) && !inAny(d[k], dallow[i])) bad(pkg " must not import " d[k] " itself (only " dallow[i] ")")
    }
    # Composition happens in one place: only cell (and the test fixtures)
    # import both master and replica.
    if (index(" " imports[pkg] " ", " lockcell/master ") && index(" " imports[pkg] " ", " lockcell/replica ") &&
        !under(pkg, "=cell") && !under(pkg, "fixtures"))
      bad(pkg " imports both master and replica; only cell and fixtures may")
  }
  if (failed) exit 1
  print "depcheck: ok (" np " packages, transitive dependencies)"
}' "$list"
