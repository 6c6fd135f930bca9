package queue

import (
	"errors"
	"strings"

	"github.com/redis/go-redis/v9"
)

// Redis's answers are read here and nowhere else in the adapter: the rest of
// queue asks these questions, and returns its callers tickets, counts or its
// own errors, never a redis.Nil they must know.

// isNil reports whether a command found nothing: no entry, no pending
// entries, or a blocking read that timed out (redis.Nil).
func isNil(err error) bool { return errors.Is(err, redis.Nil) }

// isNoGroup reports whether the stream has no such consumer group (or is not
// there at all).
func isNoGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "NOGROUP")
}

// isBusyGroup reports whether the consumer group exists already.
func isBusyGroup(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "BUSYGROUP")
}

// isUnblocked reports whether a blocking read ended because its key went.
func isUnblocked(err error) bool {
	return err != nil && strings.HasPrefix(err.Error(), "UNBLOCKED")
}
