# gantry: see README.md. Every target works on a fresh clone with Go installed.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
# Every module of the workspace, as import-path patterns (./... does not
# cross module boundaries in a go.work workspace).
MODULES := $(shell $(GO) list -m -f '{{.Path}}/...' 2>/dev/null)
MODULE_DIRS := $(shell $(GO) list -m -f '{{.Dir}}' 2>/dev/null)
FUZZTIME ?= 2m
BENCHTIME ?= 1s
BENCHCOUNT ?= 6

.PHONY: all build test vet fmt-check fuzz bench bench-go run clean tidy services chaos

all: build test

build:
	@mkdir -p $(BIN)
	$(GO) build -o $(BIN)/gantry ./cmd/gantry

## test: formatting, vet, and every test (fuzz seed corpora included).
test: fmt-check vet
	$(GO) test -count=1 $(MODULES)

vet:
	$(GO) vet $(MODULES)

fmt-check:
	@bad=$$(gofmt -l $(MODULE_DIRS)); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

## services: each service's binary, and nats-server from the version pinned in pkg/natsembed/go.mod.
services:
	@mkdir -p $(BIN)
	for s in planner executor health-gate state-store; do $(GO) build -o $(BIN)/$$s ./services/$$s || exit 1; done
	cd pkg/natsembed && $(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

## chaos: kill -9 every service (and nats-server) during a 200-node run over 5 sshd hosts.
chaos: services
	$(GO) test -tags chaos -run '^TestChaos$$' -count=1 -v -timeout 15m ./e2e

## fuzz: run every fuzz target for FUZZTIME each (default 2m).
fuzz:
	cd pkg/dag && $(GO) test -run '^$$' -fuzz '^FuzzParseJSON$$' -fuzztime $(FUZZTIME) .
	cd pkg/dag && $(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) .
	cd pkg/composition && $(GO) test -run '^$$' -fuzz '^FuzzParseYAML$$' -fuzztime $(FUZZTIME) .
	cd pkg/events && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .

## bench: the scenarios side by side with OpenSSH, Ansible and a raw Go loop (BENCH=name runs one); see docs/performance.md.
bench: build services
	@command -v ansible-playbook >/dev/null || { echo "installing ansible-core (Debian)"; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ansible-core >/dev/null; }
	$(GO) run ./bench -bin $(BIN) -out bench/results.json $(if $(BENCH),-scenario $(BENCH))

## bench-go: the Go micro-benchmarks of pkg/dag, BENCHCOUNT runs each (feed to benchstat).
bench-go:
	$(GO) test -run '^$$' -bench . -benchmem -benchtime $(BENCHTIME) -count $(BENCHCOUNT) ./pkg/dag

## run: gantry dev (embedded NATS + all services), submit examples/hello.yaml, stream it to the end.
run: build
	scripts/run-hello.sh

tidy:
	for d in $(MODULE_DIRS); do (cd $$d && $(GO) mod tidy) || exit 1; done

clean:
	rm -rf $(BIN)
