package backoff

import (
	"context"
	"errors"
	"time"
)

// RetryMax is the longest wait of Retry between two attempts.
const RetryMax = 2 * time.Second

// Permanent marks err as one that waiting will not fix (a bad password, a
// database that does not exist): Retry returns it at once, unmarked.
// Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil {
		return nil
	}
	return &permanentError{err}
}

type permanentError struct{ err error }

func (e *permanentError) Error() string { return e.err.Error() }
func (e *permanentError) Unwrap() error { return e.err }

// Retry calls attempt until it succeeds, for up to wait: the loop of a
// process that starts beside a dependency not up yet. Between two failures
// it waits as a Doubling{Max: RetryMax} does. It gives up, and returns the
// last error, when the next wait would end more than wait after the first
// attempt began (so wait 0 tries once), when ctx ends, or when attempt
// returns an error marked Permanent, which it returns unmarked.
//
// attempt is given ctx; it bounds its own attempt (a ping's timeout).
func Retry(ctx context.Context, wait time.Duration, attempt func(context.Context) error) error {
	deadline := time.Now().Add(wait)
	delays := Doubling{Max: RetryMax}
	for {
		delay := delays.Next()
		err := attempt(ctx)
		if err == nil {
			return nil
		}
		if p, ok := errors.AsType[*permanentError](err); ok {
			return p.err
		}
		if time.Now().Add(delay).After(deadline) || ctx.Err() != nil {
			return err
		}
		Sleep(ctx, delay)
	}
}
