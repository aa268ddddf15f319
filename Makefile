# gantry: see README.md. Every target works on a fresh clone with Go installed.
SHELL := /bin/bash
GO ?= go
BIN := $(CURDIR)/bin
# One module (github.com/gantry-dev/gantry); go.work adds tools/, whose
# go.mod pins the nats CLI and helm apart from gantry's own dependencies,
# and holds the Helm chart's tests.
FUZZTIME ?= 2m
BENCHTIME ?= 1s
BENCHCOUNT ?= 6
# VERSION is the build's version (pkg/buildinfo), what `nats micro ls` shows:
# a semantic version; by default 0.1.0-dev with the commit as build metadata.
GIT_REV := $(shell git rev-parse --short=12 HEAD 2>/dev/null)
VERSION ?= 0.1.0-dev$(if $(GIT_REV),+$(GIT_REV))
VERSION_FLAG := -X github.com/gantry-dev/gantry/pkg/buildinfo.version=$(VERSION)

.PHONY: docs tools helm helm-test all build test vet fmt-check fuzz bench bench-go run clean tidy services chaos linux-bins images dev-keys up down compose-test compose-env cluster-up cluster-down cluster-test cluster-chaos dist package-test

all: build test

# -buildvcs=auto: gantry version names the commit wherever git can tell it.
build:
	@mkdir -p $(BIN)
	$(GO) build -buildvcs=auto -ldflags '$(VERSION_FLAG)' -o $(BIN)/gantry ./cmd/gantry

## test: formatting, vet, and every test (fuzz seed corpora included), the Helm chart's too.
test: fmt-check vet
	@scripts/test-deps.sh
	$(GO) test -count=1 -timeout 30m ./...
	$(GO) test -count=1 -timeout 15m ./tools/...

vet:
	$(GO) vet ./... ./tools/...

fmt-check:
	@bad=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || echo .)); if [ -n "$$bad" ]; then echo "gofmt would change:"; echo "$$bad"; exit 1; fi

## services: each service's binary, and nats-server from the version pinned in go.mod.
services:
	@mkdir -p $(BIN)
	for s in planner executor health-gate state-store; do $(GO) build -ldflags '$(VERSION_FLAG)' -o $(BIN)/$$s ./services/$$s || exit 1; done
	$(GO) build -o $(BIN)/nats-server github.com/nats-io/nats-server/v2

## chaos: kill -9 every service and nats-server (8 times, some in quick succession) during a 200-node run over 5 sshd hosts, then around a cancel; fails on any panic.
chaos: services
	$(GO) test -tags chaos -run '^TestChaos$$' -count=1 -v -timeout 15m ./e2e

## fuzz: run every fuzz target for FUZZTIME each (default 2m).
fuzz:
	cd pkg/dag && $(GO) test -run '^$$' -fuzz '^FuzzParseJSON$$' -fuzztime $(FUZZTIME) .
	cd pkg/dag && $(GO) test -run '^$$' -fuzz '^FuzzPlan$$' -fuzztime $(FUZZTIME) .
	cd pkg/template && $(GO) test -run '^$$' -fuzz '^FuzzRender$$' -fuzztime $(FUZZTIME) .
	cd pkg/composition && $(GO) test -run '^$$' -fuzz '^FuzzParseYAML$$' -fuzztime $(FUZZTIME) .
	cd pkg/composition && $(GO) test -run '^$$' -fuzz '^FuzzInventory$$' -fuzztime $(FUZZTIME) .
	cd pkg/composition && $(GO) test -run '^$$' -fuzz '^FuzzInventoryReference$$' -fuzztime $(FUZZTIME) .
	cd pkg/composition && $(GO) test -run '^$$' -fuzz '^FuzzInventoryINI$$' -fuzztime $(FUZZTIME) .
	cd pkg/events && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .
	cd services/executor && $(GO) test -run '^$$' -fuzz '^FuzzParse$$' -fuzztime $(FUZZTIME) ./internal/progress

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

## tools: the nats CLI (natscli, pinned in tools/go.mod) into bin/nats.
tools:
	@mkdir -p $(BIN)
	cd tools && GOWORK=off $(GO) build -o $(BIN)/nats github.com/nats-io/natscli/nats

## helm: the helm CLI (pinned in tools/go.mod) into bin/helm.
helm:
	@mkdir -p $(BIN)
	cd tools && GOWORK=off $(GO) build -o $(BIN)/helm helm.sh/helm/v3/cmd/helm

CHART := deploy/helm/gantry
## helm-test: helm lint and helm template of deploy/helm/gantry (default values and values-cluster.yaml), then the chart's Go tests (every rendered object decoded strictly into its Kubernetes type).
helm-test: helm
	$(BIN)/helm lint --strict $(CHART)
	$(BIN)/helm lint --strict $(CHART) -f $(CHART)/values-cluster.yaml
	$(BIN)/helm template gantry $(CHART) >/dev/null
	$(BIN)/helm template gantry $(CHART) -f $(CHART)/values-cluster.yaml >/dev/null
	$(GO) test -count=1 ./tools/helmchart/

## --- docker compose (docker-compose.yml; see README "Docker Compose") ---
# Compose v2 (`docker compose`) when present, else Debian's docker-compose 1.29.
COMPOSE = $(shell if docker compose version >/dev/null 2>&1; then echo docker compose; elif command -v docker-compose >/dev/null; then echo docker-compose; fi)
# COMPOSE_PROJECT_NAME: the stack's compose project, by default gantry- and
# the start of a hash of this checkout's path, so two checkouts on one
# machine never share containers, networks, volumes or images.
CHECKOUT_ID := $(shell printf '%s' '$(CURDIR)' | sha256sum | cut -c1-8)
COMPOSE_PROJECT_NAME ?= gantry-$(CHECKOUT_ID)
export COMPOSE_PROJECT_NAME
LINUX_BIN := $(BIN)/linux
# TARGET_BASE: the SSH targets' Debian base; made by docker/target-base.sh
# (debootstrap + docker import) when it cannot be pulled.
TARGET_BASE ?= gantry/debian-sshd-base:bookworm
export TARGET_BASE
# GANTRY_TAG: the tag of the images `make images` builds and the compose
# files run: the project's name (dev for a project named gantry), so each
# checkout keeps its own images.
GANTRY_TAG ?= $(if $(filter gantry,$(COMPOSE_PROJECT_NAME)),dev,$(COMPOSE_PROJECT_NAME))
export GANTRY_TAG

## linux-bins: static (CGO_ENABLED=0) binaries of the services, the CLI and nats-server for the images.
linux-bins:
	@mkdir -p $(LINUX_BIN)
	for s in planner executor health-gate state-store; do CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '-s -w $(VERSION_FLAG)' -o $(LINUX_BIN)/$$s ./services/$$s || exit 1; done
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '-s -w $(VERSION_FLAG)' -o $(LINUX_BIN)/gantry ./cmd/gantry
	CGO_ENABLED=0 GOOS=linux $(GO) build -trimpath -ldflags '-s -w' -o $(LINUX_BIN)/nats-server github.com/nats-io/nats-server/v2

## images: the FROM-scratch images of nats and the services, the sshd target image and the keys image, built here without a registry.
images: linux-bins
	docker/target-base.sh
	docker build -q -f docker/nats.Dockerfile -t gantry/nats:$(GANTRY_TAG) $(LINUX_BIN) >/dev/null
	for s in planner executor health-gate state-store; do docker build -q -f docker/service.Dockerfile --build-arg BIN=$$s -t gantry/$$s:$(GANTRY_TAG) $(LINUX_BIN) >/dev/null || exit 1; done
	docker build -q -f docker/target.Dockerfile --build-arg TARGET_BASE=$(TARGET_BASE) -t gantry/target:$(GANTRY_TAG) docker >/dev/null
	cp docker/dev-keys.sh $(LINUX_BIN)/dev-keys.sh
	docker build -q -f docker/keys.Dockerfile --build-arg TARGET_BASE=$(TARGET_BASE) -t gantry/keys:$(GANTRY_TAG) $(LINUX_BIN) >/dev/null
	@docker images --format '{{.Repository}}:{{.Tag}}\t{{.Size}}' 'gantry/*'

## dev-keys: user key, the targets' host keys and a known_hosts for the compose stack, and the NATS identities (dev/keys).
dev-keys: build
	docker/dev-keys.sh

## up: build what is needed and start the stack (nats, the services, two executors, three sshd targets).
up: build images dev-keys
	@test -n "$(COMPOSE)" || { echo "neither 'docker compose' nor docker-compose is installed"; exit 1; }
	$(COMPOSE) up -d
	$(BIN)/gantry ping --server nats://127.0.0.1:$${GANTRY_NATS_PORT:-4222} --service gantry-planner --service gantry-state-store --wait 60s

## compose-env: the variables that point docker compose at this checkout's stack: eval "$$(make -s compose-env)".
compose-env:
	@echo "export COMPOSE_PROJECT_NAME=$(COMPOSE_PROJECT_NAME) GANTRY_TAG=$(GANTRY_TAG)"

## down: stop and remove the stack, its network and its volume.
down:
	@test -n "$(COMPOSE)" || { echo "neither 'docker compose' nor docker-compose is installed"; exit 1; }
	$(COMPOSE) down -v --remove-orphans

## compose-test: from nothing: up, a run on the targets, a target stopped and an executor restarted mid-run, down.
compose-test: build
	COMPOSE="$(COMPOSE)" MAKE="$(MAKE)" docker/compose-test.sh

tidy:
	GOWORK=off $(GO) mod tidy
	cd tools && GOWORK=off $(GO) mod tidy
	cd tools/dist && GOWORK=off $(GO) mod tidy

## --- releases (see README "Installing") ---
## dist: tarballs (linux and darwin, amd64 and arm64), .deb and .rpm with systemd units, SHA256SUMS, in dist/.
dist:
	VERSION="$(VERSION)" GO="$(GO)" scripts/dist.sh

## package-test: the packages inspected (dpkg-deb, rpm, systemd-analyze verify), then the .deb installed in a Debian 12 container and a service started against nats.
package-test: build
	COMPOSE="$(COMPOSE)" MAKE="$(MAKE)" GO="$(GO)" docker/package-test.sh

clean:
	rm -rf $(BIN) build dist

## --- the 3-node NATS cluster (docker-compose.cluster.yml, project $(CLUSTER_PROJECT_NAME)) ---
# CLUSTER_PROJECT_NAME: the cluster stack's compose project, named after
# COMPOSE_PROJECT_NAME (gantry-cluster by default), so checkouts with their
# own COMPOSE_PROJECT_NAME never touch each other's stack.
CLUSTER_PROJECT_NAME ?= $(COMPOSE_PROJECT_NAME)-cluster
export CLUSTER_PROJECT_NAME
CLUSTER_COMPOSE = COMPOSE_PROJECT_NAME=$(CLUSTER_PROJECT_NAME) $(COMPOSE) -f docker-compose.cluster.yml
# The host ports' leading digits: nats-1..3 on $(GANTRY_CLUSTER_PORTS)22..24,
# their monitoring on $(GANTRY_CLUSTER_MONITOR_PORTS)22..24.
GANTRY_CLUSTER_PORTS ?= 43
GANTRY_CLUSTER_MONITOR_PORTS ?= 83
export GANTRY_CLUSTER_PORTS GANTRY_CLUSTER_MONITOR_PORTS

## cluster-up: three clustered nats-servers (R3 streams and KV), two replicas of every service, the targets.
cluster-up: build images dev-keys
	docker/cluster-conf.sh
	$(CLUSTER_COMPOSE) up -d
	$(BIN)/gantry ping --server nats://127.0.0.1:$(GANTRY_CLUSTER_PORTS)22,nats://127.0.0.1:$(GANTRY_CLUSTER_PORTS)23,nats://127.0.0.1:$(GANTRY_CLUSTER_PORTS)24 --nkey dev/keys/nats/operator.nk --service gantry-planner --service gantry-state-store --wait 90s

## cluster-down: stop and remove the cluster stack and its volumes.
cluster-down:
	$(CLUSTER_COMPOSE) down -v --remove-orphans

## cluster-test: a 100-node run while the JetStream meta leader is stopped and one replica of each service killed.
cluster-test: build tools images dev-keys
	COMPOSE="$(COMPOSE)" docker/cluster-test.sh

## cluster-chaos: 120-node runs through a quorum loss, partitions of NATS nodes and a frozen state-store replica (docker/cluster-chaos.sh).
cluster-chaos: build tools images dev-keys
	COMPOSE="$(COMPOSE)" docker/cluster-chaos.sh

# The reference of every command (Markdown and man pages), generated from
# the commands; commit what it changes (a test fails when it is stale).
docs:
	rm -rf docs/cli
	go run ./cmd/gantry/internal/cli/gendocs docs/cli
