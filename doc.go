// Command newsfeed is a news-feed backend: fan-out on write with the
// transactional outbox pattern. One binary, every role: see `newsfeed --help`.
//
// # Layout
//
// The import graph points one way, and internal/architecture has a test that
// fails when an import goes against it:
//
//	domain ← adapters (store, feed, queue, ratelimit, sticky, live)
//	       ← services (outbox, fanout, api: they import no adapter)
//	       ← app (the only package that knows every concrete type)
//
// web (the web app's files) imports only internal/static, and admin (the
// operator console) domain and internal helpers: app hands the one to api
// and mounts the other on the ops server, each behind interfaces of its own.
//
// A package per question; each package's doc says what its files hold
// (`go doc ./feed`):
//
//	main.go     the binary: the cobra root, one line on stderr and status 1 on error
//	domain      the shared vocabulary, importing nothing: posts, follows, cursors, outbox events, errors
//	app         wiring only: configuration, the commands, one builder per role, the --dev banner
//	api         the HTTP API (echo): routes, input, errors, rate limits, live streams, the web app's routes
//	outbox      the dispatcher (claim → publish → mark published), retries, dead events, the cleaner
//	queue       the Redis streams between dispatchers and workers: partitions, takeover, dead letters
//	fanout      the worker: take a ticket, page the followers, write their feeds, acknowledge
//	feed        home feeds in Redis (meta, head and tail per user): push, trim, read, rebuild, celebrities
//	store       PostgreSQL (pgx): posts, follows, the outbox's claim, the schema's migration
//	live        live streams across processes: a hub per serve process, sharded Pub/Sub between them
//	ratelimit   per-user limits in Redis (GCRA)
//	sticky      per-user write positions, so a caller's listings read the primary until a replica caught up
//	web         the web app's files, embedded and served at /
//	admin       the operator console on metrics.addr
//	bench       the benchmark behind `newsfeed bench`: every stage beside its physical limit
//	e2e         tests that drive the built binary: crashes, faults, the browser tests
//	internal    shared helpers: testenv (a database and a Redis prefix per test), health, backoff,
//	            defaults, replicas, probe, browser, openapitest, routing, static, logctx, traceparent
//
// Beside them: schema.sql (the whole schema, embedded), config.yaml (every key
// with its default), Makefile (`make help`), scripts/ (set-up, the local
// cluster, fuzzing), deploy/ (Grafana dashboard, Prometheus alerts) and docs/.
package main
