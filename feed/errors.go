package feed

import (
	"errors"

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
