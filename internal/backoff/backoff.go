// Package backoff spaces retries, in the two shapes newsfeed needs: the
// schedule of a failing outbox event (Schedule: base·n⁴, for failures that may
// last hours), and the wait of a loop whose dependency does not answer
// (Doubling: from a tenth of a second to a few seconds, reset by a success).
// Every loop that retries uses one of them, so that no two loops back off in
// different ways.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Schedule spaces the attempts of a failing event: Base·n⁴ after the n-th
// failure, at most Max, with ±25 % jitter so that the retries of a burst
// spread out.
type Schedule struct {
	Base time.Duration
	Max  time.Duration
}

// DefaultSchedule waits 1s, 16s, 81s, … up to an hour.
var DefaultSchedule = Schedule{Base: time.Second, Max: time.Hour}

// Delay returns how long to wait after the n-th failure (1-based).
func (s Schedule) Delay(n int) time.Duration {
	a := float64(max(n, 1))
	d := min(float64(s.Base)*a*a*a*a, float64(s.Max))
	return time.Duration(d * (0.75 + 0.5*rand.Float64()))
}

// Doubling is the wait of a loop between failed attempts: Min after the
// first failure, twice the last one after each next, at most Max. A success
// calls Reset. The zero value waits 100ms doubling up to 5s.
type Doubling struct {
	Min, Max time.Duration
	last     time.Duration
}

// Next returns the wait after one more failure.
func (d *Doubling) Next() time.Duration {
	lo, hi := d.Min, d.Max
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 5 * time.Second
	}
	d.last = min(max(2*d.last, lo), hi)
	return d.last
}

// Reset starts again from Min: the dependency answered.
func (d *Doubling) Reset() { d.last = 0 }

// Sleep waits for d or until ctx ends, and reports whether it waited the
// whole time.
func Sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// MaxPostpone bounds how long work that a dependency was not ready for
// (domain.ErrUnavailable: not a failure of the work) waits to be tried again.
const MaxPostpone = 30 * time.Second

// Postpone is how long such work waits on its attempt-th try: the failure
// delay of that attempt, at most MaxPostpone — the dependency is expected
// back soon, and the work is not counted against its attempts.
func (s Schedule) Postpone(attempt int) time.Duration {
	return min(s.Delay(max(attempt, 1)), MaxPostpone)
}
