# The two commands that matter: `make run` and `make test`. Both set up
# PostgreSQL and Redis first (scripts/services.sh).
export PATH := $(PATH):/usr/local/go/bin

BIN := bin/newsfeed

.PHONY: run test model build services lint bench clean

run: services build ## build and run every role in one process (development)
	$(BIN) all --dev

# -race needs cgo: CGO_ENABLED=1 even when the environment turns it off, and
# `services` then makes sure a C compiler is installed (--cc).
test: SERVICES_FLAGS = --tests --cc
test: services ## every test, with the race detector, against the real servers; then the model-based feed test in full
	CGO_ENABLED=1 go test -race -count=1 -timeout 14m ./...
	go test -count=1 -timeout 5m -run '^TestFeedModel$$' -v ./api/

model: SERVICES_FLAGS = --tests
model: services ## the model-based feed test alone, longer: make model CHECKS=200
	NEWSFEED_MODEL_CHECKS=$(or $(CHECKS),100) go test -count=1 -timeout 60m -run '^TestFeedModel$$' -v ./api/

# What `newsfeed version` prints; outside a git checkout, "dev" and "unknown".
VERSION := $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
COMMIT := $(shell git rev-parse HEAD 2>/dev/null || echo unknown)$(shell git diff --quiet HEAD 2>/dev/null || echo -dirty)

build: ## the binary, bin/newsfeed
	go build -ldflags "-X github.com/newsfeed/newsfeed/app.Version=$(VERSION) -X github.com/newsfeed/newsfeed/app.Commit=$(COMMIT)" -o $(BIN) .

services: ## start (or install) PostgreSQL and Redis (and, for make test, a C compiler)
	@scripts/services.sh $(SERVICES_FLAGS)

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	go vet ./...

clean:
	rm -rf bin

bench: services build ## the default benchmark scenario (under 3 minutes); results in bench-results/
	$(BIN) bench
