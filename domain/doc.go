// Package domain is the shared vocabulary of newsfeed: posts, follows,
// cursors, the outbox events that announce changes, the delivery a fan-out
// worker receives, and the errors a user can cause. It imports nothing of the
// project, so that every other package can depend on it and the graph reads
// domain ← adapters (store, feed, queue, ratelimit) and services (outbox,
// fanout, api) ← app. An adapter translates its driver's errors into these
// (store turns pgx.ErrNoRows into ErrNotFound, say); nothing above an adapter
// sees a driver error it must recognise.
package domain
