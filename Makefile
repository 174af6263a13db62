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

.PHONY: all build run certs test bench race vet depcheck fmt clean
.PHONY: torture

all: build

build:
	$(GO) build -o $(BIN)/lockcelld ./cmd/lockcelld
	$(GO) build -o $(BIN)/lockcell ./cmd/lockcell

run: build
	$(BIN)/lockcelld dev --data $(DATA)

# Certificates for a cell with mutual TLS: ca.crt/ca.key, replica-1..5 and
# admin, plus USERS (make certs USERS=alice,bob). Existing files are kept.
certs: build
	$(BIN)/lockcelld certs --dir $(CERTS) $(if $(USERS),--users $(USERS))

# The CI test command: vet, the package dependency rule, then every test
# under the race detector.
test: vet depcheck
	$(GO) test $(TESTFLAGS) $(PKGS)

race:
	$(GO) test -race -count=1 $(PKGS)

vet:
	$(GO) vet $(PKGS)
	@test -z "$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))" || { echo "gofmt needed:"; gofmt -l .; exit 1; }

bench:
	$(GO) test -run '^$$' -bench . -benchtime 2s $(PKGS)

depcheck:
	@$(GO) list -f '{{.ImportPath}}: {{join .Imports " "}}' $(PKGS) | sh scripts/depcheck.sh

fmt:
	gofmt -w $$(git ls-files '*.go')

clean:
	rm -rf $(BIN)

# The full chaos campaign (TESTPLAN T-full, fixtures/chaos): the same tests
# as in `make test` with long durations, a progress line per fault and per
# ~30 s, then a summary table (ops, faults, unknown outcomes, violations).
# Reports of failed runs stay under TORTURE_DIR. Knobs: LOCKCELL_CHAOS_SEED,
# LOCKCELL_CHAOS_DURATION (fault phase, default 300s), LOCKCELL_CHAOS_PROBES
# (stale-read probes, default 200), LOCKCELL_CHAOS_KEEP=1, TORTURE_RUN.
TORTURE_RUN   ?= ^Test(LinearizableFiles|StaleReadProbe|CacheNeverStale)$$
TORTUREFLAGS  ?= -count=1 -timeout 100m
torture:
	@dir=$${TORTURE_DIR:-$${TMPDIR:-/tmp}/lockcell-torture-$$(date +%Y%m%d-%H%M%S)}; mkdir -p $$dir; \
	echo "torture: reports and summary in $$dir"; \
	LOCKCELL_CHAOS_TORTURE=1 LOCKCELL_CHAOS_ROOT=$$dir $(GO) test $(TORTUREFLAGS) -v -run '$(TORTURE_RUN)' ./fixtures/chaos/; st=$$?; \
	$(GO) run ./fixtures/chaos/cmd/summary $$dir; sum=$$?; \
	test $$st -eq 0 -a $$sum -eq 0
