# The two commands that matter: `make run` and `make test`. Both set up
# PostgreSQL and Redis first (scripts/services.sh). `make help` lists the rest.
export PATH := $(PATH):/usr/local/go/bin

BIN := bin/newsfeed
# The bench's own binary (cmd/newsfeed-bench): the service links none of its
# plotting and progress-bar modules.
BENCH_BIN := bin/newsfeed-bench

# golangci-lint, pinned, built from the Go module proxy (no prebuilt download)
# once per version into a cache outside the checkout.
GOLANGCI_LINT_VERSION := v2.15.0
TOOLS_CACHE := $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/newsfeed-tools
TOOLS := $(TOOLS_CACHE)/$(GOLANGCI_LINT_VERSION)
GOLANGCI_LINT := $(TOOLS)/golangci-lint

# Redocly CLI, pinned, installed with npm once per version into the same
# cache. 1.34.20: the 2.x line needs Node >= 20.19 and npm >= 10, and
# Debian 12's nodejs is 18; 1.34.21 does not install (its @redocly/respect-core
# was never published).
REDOCLY_VERSION := 1.34.20
REDOCLY_DIR := $(TOOLS_CACHE)/redocly-$(REDOCLY_VERSION)
REDOCLY := $(REDOCLY_DIR)/node_modules/.bin/redocly

# How long `make test` fuzzes each target; `make fuzz` runs longer.
FUZZ_TIME_CI := 3s
# What the Redis Cluster pass of make test leaves out (see there).
CLUSTER_PASS_SKIP := ^(TestWebApp.*|Fuzz.*|TestBadConfiguration|TestToken|TestMigrate|TestVersion|TestConfigCheck|TestMetricsPassPromtool|TestOperatorConsole.*|TestBenchAnywhere|TestSIGTERMWhileBusy|TestDrain|TestServeStartsWithoutRedis|TestAllStartsWithoutRedis|TestDependenciesDown|TestOutagesLoggedOncePerTransition|TestDispatcherKilledMidClaim|TestServeKilledDuringBurst)$$

.PHONY: help run reset test test-short model fuzz build build-bench image services lint spec-lint monitoring-check bench bench-cluster clean

help: ## list the targets
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-17s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

# The first build compiles every dependency: 230-265 s of CPU measured here
# with an empty GOCACHE, so about 2 minutes on 2 idle cores (the shared
# machine took 7-10 minutes). Say so, or `make run` looks stuck.
BUILD_SECONDS := 120
run: services ## build and run every role in one process (development); Ctrl-C stops it, make reset starts afresh
	@echo "building $(BIN) (the first build takes about $(BUILD_SECONDS) s on 2 cores, more on a busy machine)…"
	$(GO_BUILD)
	$(BIN) all --dev

# What `make run` made, and nothing else: the database and the Redis keys of
# config.yaml's defaults (a test holds these to them), never what NEWSFEED_
# variables or another --config name. The tests' databases (nf_test_*), Redis
# dbs 1-15 and nftest: keys, the bench's (nfbench:) and the cluster's
# (7000-7005) are not touched.
RESET_PG := postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable
RESET_DATABASE := newsfeed
RESET_REDIS := -h 127.0.0.1 -p 6379 -n 0
RESET_REDIS_PREFIX := nf:
reset: services ## drop the development database and its Redis keys (newsfeed on 127.0.0.1:5432, nf:* in Redis db 0): stop make run first
	psql '$(RESET_PG)' -v ON_ERROR_STOP=1 -qc 'DROP DATABASE IF EXISTS "$(RESET_DATABASE)" WITH (FORCE)'
	redis-cli $(RESET_REDIS) --scan --pattern '$(RESET_REDIS_PREFIX)*' | xargs -r -d '\n' -n 500 redis-cli $(RESET_REDIS) UNLINK >/dev/null
	@echo "reset: database $(RESET_DATABASE) dropped, Redis keys $(RESET_REDIS_PREFIX)* of db 0 deleted; make run creates them again"

# -race needs cgo: CGO_ENABLED=1 even when the environment turns it off, and
# `services` then makes sure a C compiler is installed (--cc). The browser
# tests (e2e/webapp_test.go, e2e/admin_test.go) need Chromium: `services` installs it
# (--browser), and NEWSFEED_TEST_BROWSER=required makes them fail, not skip,
# where it is missing all the same. Likewise promtool (--promtool) and
# NEWSFEED_TEST_PROMTOOL=required for the tests that run it.
# The cluster pass runs with the replica lagging on purpose (APPLY_DELAY) and
# every process's database.read_url on it: the guarantees hold with the lag,
# and the read-your-writes tests, which skip without a replica, run.
test: SERVICES_FLAGS = --tests --cc --browser --node --promtool
test: export NEWSFEED_TEST_BROWSER = required
test: export NEWSFEED_TEST_PROMTOOL = required
test: APPLY_DELAY = 2s
test: services lint spec-lint monitoring-check cluster-up ## everything CI runs: lint, the OpenAPI lint, promtool on the alerts, every test with the race detector, the feed, queue, live, API (the model-based feed test in full), e2e, replicas and bench suites again on the Redis Cluster with a replica 2 s behind, then a primary killed mid fan-out and a third of the slots resharded under load, each fuzz target briefly
	@# -p 3: three test binaries at once on two cores. The e2e suite, the
	@# longest by far (about 5 minutes), mostly waits on the processes it
	@# drives; with the default (one per core) it started only once the
	@# packages listed before it were done.
	CGO_ENABLED=1 go test -race -count=1 -p 3 -timeout 14m ./...
	@# The cluster and the replica are shared: once more, after the minutes above,
	@# restart what a failover test killed and make sure the replica still lags.
	@# The model-based feed test runs in full here (under -race it draws fewer
	@# steps); the tests that owe nothing to where Redis keys live (CLI, browser,
	@# fuzz seeds, Redis unreachable, PostgreSQL-side crashes) ran above.
	scripts/cluster.sh up --apply-delay $(APPLY_DELAY)
	NEWSFEED_TEST_REDIS_CLUSTER_URL='$(CLUSTER_TEST_URL)' NEWSFEED_TEST_REPLICA_URL='$(CLUSTER_REPLICA_URL)' \
		go test -count=1 -timeout 10m -skip '$(CLUSTER_PASS_SKIP)' ./sticky/ ./feed/ ./queue/ ./live/ ./api/ ./e2e/ ./internal/replicas/ ./bench/
	NEWSFEED_TEST_REPLICA_URL='$(CLUSTER_REPLICA_URL)' go test -count=1 -timeout 5m -run 'Replayed|WritePosition' ./store/
	@# Alone, since they kill and reshard nodes of the shared cluster.
	NEWSFEED_TEST_REDIS_CLUSTER_URL='$(CLUSTER_TEST_URL)' NEWSFEED_TEST_REPLICA_URL='$(CLUSTER_REPLICA_URL)' NEWSFEED_TEST_CLUSTER_FAULTS=1 \
		go test -count=1 -timeout 10m -run '^(TestRedisPrimaryKilledMidFanout|TestReshardUnderLoad)$$' -v ./e2e/
	scripts/fuzz.sh $(FUZZ_TIME_CI)

# make test-short's tests: the inner loop, in its own mode (-short,
# -parallel 8). make test runs every test in full instead.
TEST_SHORT = go test -short -count=1 -timeout 5m -parallel 8 $$(go list ./... | grep -v /e2e)

# The integration tests mostly wait (on PostgreSQL, Redis, a worker's
# blocking read): -parallel 8 runs more of them at once than the default of
# one per core, every test still running (fanout's 40 s become 13 s here).
test-short: SERVICES_FLAGS = --tests
test-short: services ## the inner loop: unit and integration tests without the e2e suite or the full model test (under a minute)
	$(TEST_SHORT)

model: SERVICES_FLAGS = --tests
model: services ## the model-based feed test alone, longer: make model CHECKS=200
	NEWSFEED_MODEL_CHECKS=$(or $(CHECKS),100) go test -count=1 -timeout 60m -run '^TestFeedModel$$' -v ./api/

fuzz: SERVICES_FLAGS = --tests
fuzz: services ## every fuzz target for FUZZ_TIME each (default 1m): make fuzz FUZZ_TIME=5m
	scripts/fuzz.sh $(or $(FUZZ_TIME),1m)

# What `newsfeed version` prints; outside a git checkout, "dev" and "unknown".
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git rev-parse --git-dir >/dev/null 2>&1 && ! git diff --quiet HEAD 2>/dev/null && echo -dirty)

GO_BUILD = go build -ldflags "-X github.com/newsfeed/newsfeed/app.Version=$(VERSION) -X github.com/newsfeed/newsfeed/app.Commit=$(COMMIT)" -o $(BIN) .
build: ## the binary, bin/newsfeed
	$(GO_BUILD)

build-bench: ## the bench's binary, bin/newsfeed-bench (it starts bin/newsfeed for its worker processes)
	go build -o $(BENCH_BIN) ./cmd/newsfeed-bench

# The container image (Dockerfile), with podman or docker. podman comes first:
# it needs no daemon, where docker's client alone (no engine running) builds
# nothing; docker is taken only where podman is not installed
# (CONTAINER_ENGINE=docker picks it all the same). Before anything is built,
# the engine must answer `<engine> info`; if it cannot, make image says why
# and what to install, instead of the engine's own error halfway through.
# By default the static binary is built here and packed on an empty base:
# nothing is pulled from a registry. IMAGE_FROM=source builds it inside Go's
# image instead (pulls golang:1.26). Either way: version stamped as by
# `make build`, non-root.
IMAGE ?= newsfeed:$(VERSION)
IMAGE_FROM ?= host
CONTAINER_ENGINE ?= $(or $(shell command -v podman >/dev/null 2>&1 && echo podman),$(shell command -v docker >/dev/null 2>&1 && echo docker))
IMAGE_ROOTFS := build/image-rootfs
PODMAN_INSTALL := apt-get install -y podman
image: ## the container image, with podman (preferred) or docker: make image [IMAGE=newsfeed:tag] [IMAGE_FROM=source] [CONTAINER_ENGINE=docker]
	@engine='$(CONTAINER_ENGINE)'; \
	if [ -z "$$engine" ]; then \
		echo "make image: neither podman nor docker is installed. Install podman, which needs no daemon (Debian/Ubuntu): $(PODMAN_INSTALL)" >&2; exit 1; \
	fi; \
	if ! command -v "$$engine" >/dev/null 2>&1; then \
		echo "make image: CONTAINER_ENGINE=$$engine is not installed. Install podman, which needs no daemon (Debian/Ubuntu): $(PODMAN_INSTALL)" >&2; exit 1; \
	fi; \
	if ! why=$$("$$engine" info 2>&1 >/dev/null); then \
		why=$$(printf '%s\n' "$$why" | grep -v '^[[:space:]]*$$' | tail -n 1); \
		case "$${engine##*/}" in \
		docker) echo "make image: docker's client is installed but no Docker daemon answers ($$why). Start the daemon (dockerd, or systemctl start docker), or install podman, which needs no daemon (Debian/Ubuntu): $(PODMAN_INSTALL)" >&2 ;; \
		*) echo "make image: $$engine cannot run here: \`$$engine info\` failed ($$why)." >&2 ;; \
		esac; \
		exit 1; \
	fi
ifeq ($(IMAGE_FROM),host)
	rm -rf $(IMAGE_ROOTFS)
	CGO_ENABLED=0 go build -trimpath -ldflags "-s -w -X github.com/newsfeed/newsfeed/app.Version=$(VERSION) -X github.com/newsfeed/newsfeed/app.Commit=$(COMMIT)" -o $(IMAGE_ROOTFS)/usr/local/bin/newsfeed .
	scripts/image-rootfs.sh $(IMAGE_ROOTFS)
endif
	@# BuildKit (docker's; podman's builder behaves alike) builds only the stages the
	@# image needs: the legacy builder would pull golang for the host path too.
	DOCKER_BUILDKIT=1 $(CONTAINER_ENGINE) build --build-arg BINARY_FROM=$(IMAGE_FROM) --build-arg VERSION=$(VERSION) --build-arg COMMIT=$(COMMIT) -t $(IMAGE) .
	@echo "built $(IMAGE): $(CONTAINER_ENGINE) run --rm $(IMAGE) version"

services: ## start (or install) PostgreSQL and Redis (and, for make test, a C compiler, Chromium, Node.js with npm, and promtool)
	@scripts/services.sh $(SERVICES_FLAGS)

# A Redis Cluster on 127.0.0.1:7000-7005 and a PostgreSQL replica on 5433
# (scripts/cluster.sh; `scripts/cluster.sh env` prints the URLs to use).
# cluster-up needs PostgreSQL running (the replica is made from it) and
# redis-server installed: `services` sees to both, on a fresh checkout too.
# cluster-down also takes out the pg_hba.conf line and the lock files that
# cluster-up (and the cluster tests) left.
.PHONY: cluster-up cluster-down
CLUSTER_TEST_URL = $(shell scripts/cluster.sh env | sed -n "s/^export NEWSFEED_TEST_REDIS_CLUSTER_URL='\(.*\)'$$/\1/p")
CLUSTER_REPLICA_URL = $(shell scripts/cluster.sh env | sed -n "s/^export NEWSFEED_TEST_REPLICA_URL='\(.*\)'$$/\1/p")
cluster-up: services ## start the local Redis Cluster (3+3 nodes, 7000-7005) and PostgreSQL replica (5433): make cluster-up [APPLY_DELAY=2s]
	@scripts/cluster.sh up $(if $(APPLY_DELAY),--apply-delay $(APPLY_DELAY))

cluster-down: ## stop the local Redis Cluster and PostgreSQL replica, remove their data, the pg_hba.conf line and the lock files
	@scripts/cluster.sh down

$(GOLANGCI_LINT):
	@echo "lint: building golangci-lint $(GOLANGCI_LINT_VERSION) from the Go module proxy (once)"
	GOFLAGS= GOBIN=$(TOOLS) go install github.com/golangci/golangci-lint/v2/cmd/golangci-lint@$(GOLANGCI_LINT_VERSION)

lint: $(GOLANGCI_LINT) ## golangci-lint (.golangci.yml: errcheck, staticcheck, revive, gosec, bodyclose, noctx, …) and gofmt
	$(GOLANGCI_LINT) run ./...

$(REDOCLY):
	@scripts/services.sh --no-servers --node
	@echo "spec-lint: installing @redocly/cli $(REDOCLY_VERSION) with npm (once)"
	rm -rf $(REDOCLY_DIR)
	npm install --prefix $(REDOCLY_DIR) --no-audit --no-fund --loglevel=error @redocly/cli@$(REDOCLY_VERSION)

# No telemetry, no update check: a lint reads the file and nothing else.
spec-lint: $(REDOCLY) ## lint docs/openapi.yaml with Redocly (its rules: redocly.yaml)
	@scripts/services.sh --no-servers --node
	REDOCLY_TELEMETRY=off REDOCLY_SUPPRESS_UPDATE_NOTICE=true $(REDOCLY) lint docs/openapi.yaml

# The alert rules and their unit tests (promtool, from Debian's prometheus
# package). `make test` also runs, with go test, deploy/monitoring_test.go
# (the Grafana dashboard against Grafana's schema, its queries through
# promtool, every alert's runbook and tests) and the e2e test
# TestMetricsPassPromtool (`promtool check metrics` on each role's /metrics).
monitoring-check: ## check the Prometheus configuration and alert rules and run the rules' unit tests (deploy/prometheus)
	@scripts/services.sh --no-servers --promtool
	promtool check config deploy/prometheus/prometheus.yml
	promtool check rules deploy/prometheus/alerts.yml
	promtool test rules deploy/prometheus/alerts_test.yml

clean: ## remove bin/ and build/
	rm -rf bin build

# The bench runs the roles in its own process and starts bin/newsfeed, built
# beside it, for `migrate` and for its worker processes: both are built
# first. Flags: bin/newsfeed-bench --help.
bench: services build build-bench ## the default benchmark scenario (about 4 minutes), bin/newsfeed-bench; results in bench-results/
	$(BENCH_BIN)

bench-cluster: services build build-bench cluster-up ## make bench, then the fan-out and read stages again on the local Redis Cluster (about 5 minutes)
	$(BENCH_BIN) --redis-cluster --redis-cluster-url '$(CLUSTER_TEST_URL)'
