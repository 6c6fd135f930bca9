// Package health knows whether the process's dependencies (PostgreSQL and
// Redis) answer, and logs each change once: one line when one stops
// answering, one when it answers again, however many requests and loops
// fail in between. Those failures ask Watch.Explained and, when an outage
// the watch has logged explains them, log at debug only (Log): an outage
// reads as two lines in every role, not one stack trace per request.
//
// The watch learns of an outage from its own pings — Run pings every
// dependency every interval, each ping under a short deadline, so that one
// that stops answering without refusing (a silent network partition) is
// known within interval + timeout even when nothing fails on it — or
// earlier from a failure (it pings at once when something fails that no
// known outage explains) or a readiness check. While a dependency is down
// the same pings log its return, whether anything uses it or not.
package health

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// The names of the dependencies the processes watch, as their log lines and
// /readyz say them.
const (
	PostgreSQL = "PostgreSQL"
	Redis      = "Redis"
)

// Dependency is one service the process needs.
type Dependency struct {
	// Name is how operators call it: "PostgreSQL", "Redis".
	Name string
	// Key is the configuration key that points at it ("database.url"),
	// for the log line.
	Key string
	// Ping returns nil when the dependency answers.
	Ping func(ctx context.Context) error
}

// The defaults of a Watch.
const (
	// DefaultInterval is how often Run pings the dependencies: a PING
	// and an empty query, a few a second, cost nothing to either.
	DefaultInterval = 250 * time.Millisecond
	// DefaultTimeout bounds one ping: a dependency that does not answer
	// within it is down. With DefaultInterval, a silent one is known
	// within 1.25 s.
	DefaultTimeout = time.Second
)

// Watch tracks the dependencies. Its methods are safe for concurrent use.
type Watch struct {
	deps     []*dependency
	log      *zap.Logger
	interval time.Duration
	timeout  time.Duration

	mu       sync.Mutex // one round of Run's and Explained's pings at a time
	pingedAt time.Time  // when the last such round began

	recordMu   sync.Mutex // guards what rounds record, and each dependency's since
	recordedAt time.Time  // when the round that recorded last began

	backAt atomic.Int64 // when a dependency last answered again (Unix ns)
}

// minPingGap is the least time between two rounds of pings that failures
// ask for: failures that no outage explains (a bug answering 500s) cost at
// most ten rounds a second, and a failure met within it of a round that
// found everything up is not taken for an outage.
const minPingGap = 100 * time.Millisecond

// aftermath is how long after a dependency answers again its outage still
// explains a broken connection: connections broken while it was down (a
// pool's idle ones, a blocking read's) fail once more when next used, and
// that is the outage the watch logged, not a new one. Any other failure is
// explained by an outage only while it lasts.
const aftermath = 5 * time.Second

// brokenConnection reports whether err is a connection that broke: what a
// connection made before an outage meets after it.
func brokenConnection(err error) bool {
	var netErr net.Error
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed) || errors.As(err, &netErr)
}

type dependency struct {
	Dependency
	down  atomic.Bool
	since time.Time // when it went down; guarded by Watch.recordMu
}

// NewWatch watches deps, logging to log; a zero interval or timeout takes
// its default.
func NewWatch(log *zap.Logger, interval, timeout time.Duration, deps ...Dependency) *Watch {
	if interval <= 0 {
		interval = DefaultInterval
	}
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	w := &Watch{log: log, interval: interval, timeout: timeout}
	for _, d := range deps {
		w.deps = append(w.deps, &dependency{Dependency: d})
	}
	return w
}

// DownError names the dependency that does not answer.
type DownError struct {
	Name string
	Err  error
}

func (e *DownError) Error() string { return e.Name + " is unreachable" }
func (e *DownError) Unwrap() error { return e.Err }

// Check pings every dependency now and returns a *DownError for the first
// that does not answer, or nil: the readiness of the process, within the
// watch's timeout (it does not wait for a round already under way). A
// change is logged like any other.
func (w *Watch) Check(ctx context.Context) error {
	errs := w.round(ctx)
	for i, d := range w.deps {
		if errs[i] != nil {
			return &DownError{Name: d.Name, Err: errs[i]}
		}
	}
	return nil
}

// Down reports whether a dependency is known to be down.
func (w *Watch) Down() bool {
	for _, d := range w.deps {
		if d.down.Load() {
			return true
		}
	}
	return false
}

// IsDown reports whether the dependency called name is known to be down:
// the watch has logged it going and not yet coming back. While it is, Run
// pings it every interval, so work that can do without it may skip it
// rather than wait for it to fail again.
func (w *Watch) IsDown(name string) bool {
	for _, d := range w.deps {
		if d.Name == name {
			return d.down.Load()
		}
	}
	return false
}

// Explained reports whether err, which some work met, is explained by an
// outage that the watch has logged: a dependency known to be down (or, for
// a broken connection, back for less than aftermath), or found down by
// pinging them now. Concurrent callers wait for one round of pings,
// and rounds are at least minPingGap apart (a caller may wait that long). It is false for nil and for a
// context the caller cancelled: those are no outage.
func (w *Watch) Explained(ctx context.Context, err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	if w.Down() || brokenConnection(err) && time.Since(time.Unix(0, w.backAt.Load())) < aftermath {
		return true
	}
	asked := time.Now()
	w.mu.Lock()
	defer w.mu.Unlock()
	switch {
	case w.Down():
		return true // found by the round this caller waited for
	case w.pingedAt.After(asked):
		return false // a round that began after the failure found everything up
	}
	// A round that began before the failure cannot speak for it, however
	// recent: wait out the gap between rounds, then ask.
	time.Sleep(minPingGap - time.Since(w.pingedAt))
	w.pingAll(ctx)
	return w.Down()
}

// Run pings the dependencies every interval, each ping bounded by the
// watch's timeout, until ctx ends; it returns nil. A round that a failure
// or a check made less than an interval ago stands for the next one.
func (w *Watch) Run(ctx context.Context) error {
	tick := time.NewTicker(w.interval)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		w.mu.Lock()
		if time.Since(w.pingedAt) >= w.interval/2 {
			w.pingAll(ctx)
		}
		w.mu.Unlock()
	}
}

// pingAll is round for Run and Explained. w.mu is held.
func (w *Watch) pingAll(ctx context.Context) []error {
	w.pingedAt = time.Now()
	return w.round(ctx)
}

// round pings every dependency at once, each within the watch's timeout,
// records what changed — unless a round that began later has recorded
// already: what it found is newer — and returns each one's error. The
// pings outlive a caller that gives up (a client that left must not make
// a dependency look down).
func (w *Watch) round(ctx context.Context) []error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), w.timeout)
	defer cancel()
	began := time.Now()
	errs := make([]error, len(w.deps))
	var wg sync.WaitGroup
	for i, d := range w.deps {
		wg.Go(func() { errs[i] = d.Ping(ctx) })
	}
	wg.Wait()
	w.recordMu.Lock()
	defer w.recordMu.Unlock()
	if began.Before(w.recordedAt) {
		return errs
	}
	w.recordedAt = began
	for i, d := range w.deps {
		w.record(d, errs[i])
	}
	return errs
}

// record notes one ping's outcome and logs a change. w.recordMu is held.
func (w *Watch) record(d *dependency, err error) {
	switch {
	case err != nil && !d.down.Load():
		d.down.Store(true)
		d.since = time.Now()
		w.log.Warn(d.Name+" is unreachable: what needs it fails, and is retried, until it answers",
			zap.String("dependency", d.Name), zap.String("key", d.Key), zap.Error(err))
	case err == nil && d.down.Load():
		d.down.Store(false)
		w.backAt.Store(time.Now().UnixNano())
		w.log.Info(d.Name+" answers again",
			zap.String("dependency", d.Name), zap.Duration("down_for", time.Since(d.since).Round(time.Millisecond)))
	}
}

// Explainer tells whether an outage explains an error: a *Watch, or nil.
type Explainer interface {
	Explained(ctx context.Context, err error) bool
}

// Log logs msg with err at warn, or at debug when outages (which may be
// nil) explains err: the outage itself is logged once, by the watch.
func Log(ctx context.Context, outages Explainer, log *zap.Logger, msg string, err error, fields ...zap.Field) {
	level := zapcore.WarnLevel
	if outages != nil && outages.Explained(ctx, err) {
		level = zapcore.DebugLevel
	}
	if ce := log.Check(level, msg); ce != nil {
		ce.Write(append(fields, zap.Error(err))...)
	}
}
