# lockcell: a Chubby-style lock service.
#   make run    five-replica dev cell on loopback (ports 7001-7005, data ./lockcell-data)
#   make test   the test suite (race detector on), as CI runs it
GO       ?= go
BIN      := bin
PKGS     := ./...
DATA     ?= ./lockcell-data
TESTFLAGS ?= -race -count=1 -timeout 14m

.PHONY: all build run test bench race vet depcheck fmt clean

all: build

build:
	$(GO) build -o $(BIN)/lockcelld ./cmd/lockcelld
	$(GO) build -o $(BIN)/lockcell ./cmd/lockcell

run: build
	$(BIN)/lockcelld dev --data $(DATA)

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
