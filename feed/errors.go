package feed

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis's answers are read here and nowhere else in the adapter: the rest of
// feed asks these questions, and returns its callers pages, posts or
// domain errors, never a redis.Nil they must know.

// isNil reports whether a command found nothing: a key or a field that is
// not there (redis.Nil).
func isNil(err error) bool { return errors.Is(err, redis.Nil) }

// isWrongType reports whether a key holds another type than the command's
// (WRONGTYPE: a sorted set an older version left where a string is now).
func isWrongType(err error) bool { return redis.HasErrorPrefix(err, "WRONGTYPE") }

// isNoScript reports whether EVALSHA named a script the server does not
// hold (NOSCRIPT: a restart, or SCRIPT FLUSH): it is sent again in full.
func isNoScript(err error) bool { return redis.HasErrorPrefix(err, "NOSCRIPT") }

// isUnreachable tells a node that did not answer from one that answered
// with an error (CONFIG refused, say).
func isUnreachable(err error) bool {
	var rerr redis.Error
	return !errors.As(err, &rerr)
}

// isRefusedByPrimary tells whether a script call sent to a cluster primary
// with its keys in its arguments failed because of where those keys live
// now, or because the primary did not answer: a key of a slot it no longer
// serves, or is moving away ("non local key"), a primary demoted to replica
// (READONLY), the cluster down for it, or no answer at all. Calls routed
// one set at a time by their keys may get past each: the client follows
// MOVED and ASK and reloads the slot map.
func isRefusedByPrimary(err error) bool {
	msg := err.Error()
	return isUnreachable(err) || strings.Contains(msg, "non local key") || strings.Contains(msg, "cluster is down") ||
		redis.HasErrorPrefix(err, "READONLY")
}
