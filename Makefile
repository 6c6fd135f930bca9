# The two commands that matter: `make run` and `make test`. Both set up
# PostgreSQL and Redis first (scripts/services.sh).
export PATH := $(PATH):/usr/local/go/bin

BIN := bin/newsfeed

.PHONY: run test build services lint bench clean

run: services build ## build and run every role in one process (development)
	$(BIN) all --dev

test: services ## every test, with the race detector, against the real servers
	go test -race -count=1 -timeout 14m ./...

build:
	go build -o $(BIN) .

services: ## start (or install) PostgreSQL and Redis
	@scripts/services.sh

lint:
	@test -z "$$(gofmt -l .)" || { gofmt -l .; exit 1; }
	go vet ./...

clean:
	rm -rf bin

bench: services build ## the default benchmark scenario (under 3 minutes); results in bench-results/
	$(BIN) bench
