package testenv

import "go.uber.org/goleak"

// LeakOptions are the goroutines goleak may find at the end of a package's
// tests that are not theirs to end: go-redis retries a failed dial from a
// goroutine of its pool that sleeps a second between tries and ends at the
// first look after the client closed (tests point clients at a Redis that
// is not there on purpose).
func LeakOptions() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreAnyFunction("github.com/redis/go-redis/v9/internal/pool.(*ConnPool).tryDial"),
	}
}
