// Package live carries changes of home feeds to the readers who watch them
// (GET /v1/feed/stream), across processes, over Redis sharded Pub/Sub.
//
// Three parts:
//   - A Hub, in every process that serves the API, holds the streams open
//     on it. It registers itself and the users it holds streams for in Redis
//     (presence), counts each user's streams across processes
//     (stream.max_per_user), and listens on a shard channel of its own, its
//     inbox.
//   - A Publisher, in every process that changes feeds (workers, and the API
//     for follows), keeps a copy of the presence in memory and, after a page
//     of feeds was written, sends one message to each inbox that holds a
//     stream of a follower in the page: the post and which of its readers
//     get it. A reader who is not connected costs nothing but a map look-up
//     in the worker; with nobody connected, no message is sent at all.
//   - The stream itself (api) resumes from the feed, takes the hub's events,
//     and reads the top of the feed again when something may have been
//     missed: Pub/Sub is at most once, and presence reaches workers a moment
//     after a reader connects, so the feed, not the channel, is the truth.
//
// Every key and channel hangs off redis.prefix; per-user and per-instance
// keys carry a hash tag, so they spread over a Redis Cluster's shards.
package live

import "strconv"

type keys struct{ prefix string }

// instances is a sorted set of the hubs that are up: member the instance
// id, score the Unix time in milliseconds until which its lease holds.
func (k keys) instances() string { return k.prefix + "live:instances" }

// users is a hub's hash of user id → streams it holds for them, with the
// hub's lease as its TTL.
func (k keys) users(instance string) string { return k.prefix + "live:users:{" + instance + "}" }

// conns is a user's sorted set of open streams, in every process: member
// instance/stream, score the Unix time in milliseconds its lease ends.
func (k keys) conns(userID int64) string {
	return k.prefix + "live:conns:{" + strconv.FormatInt(userID, 10) + "}"
}

// inbox is the shard channel a hub listens on.
func (k keys) inbox(instance string) string { return k.prefix + "live:inbox:{" + instance + "}" }

// presence is the shard channel on which hubs announce the users who come
// and go, so that publishers need not wait for their next reload.
func (k keys) presence() string { return k.prefix + "live:presence" }
