package store

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/backoff"
)

// OutboxChannel is the LISTEN/NOTIFY channel that wakes dispatchers.
const OutboxChannel = "newsfeed_outbox"

// Notifier sends one debounced NOTIFY after writes to the outbox. It is sent
// from the application after commit rather than by a trigger per row: NOTIFY
// takes a global lock at commit, and a burst of writes needs one wake-up.
type Notifier struct {
	pool    *pgxpool.Pool
	pending chan struct{}
	log     *zap.Logger
}

// NewNotifier builds a Notifier; Run must run for it to send anything.
func NewNotifier(pool *pgxpool.Pool, log *zap.Logger) *Notifier {
	return &Notifier{pool: pool, pending: make(chan struct{}, 1), log: log}
}

// Notify asks for a wake-up; it never blocks. Many calls in a burst send one.
func (n *Notifier) Notify() {
	select {
	case n.pending <- struct{}{}:
	default:
	}
}

// Run sends the wake-ups until ctx ends, then returns nil; a failed NOTIFY
// is logged and does not stop it (a lost wake-up costs at most a poll
// interval). Run it in the process's errgroup.
func (n *Notifier) Run(ctx context.Context) error {
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-n.pending:
		}
		if _, err := n.pool.Exec(ctx, "SELECT pg_notify($1, '')", OutboxChannel); err != nil && ctx.Err() == nil {
			n.log.Debug("outbox notify failed; dispatchers will poll", zap.Error(err))
		}
		select { // debounce: coalesce what arrives in the next few milliseconds
		case <-ctx.Done():
			return nil
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Listener LISTENs on OutboxChannel on a connection of its own (not from
// the pool) and signals on Wake. Nothing runs until Run does, in the
// process's errgroup.
type Listener struct {
	url  string
	log  *zap.Logger
	wake chan struct{}
}

// NewListener builds a Listener on the database at url.
func NewListener(url string, log *zap.Logger) *Listener {
	return &Listener{url: url, log: log, wake: make(chan struct{}, 1)}
}

// Wake receives a signal after notifications; many in a burst may make one.
func (l *Listener) Wake() <-chan struct{} { return l.wake }

// Run listens until ctx ends, then returns nil. It reconnects after
// failures, with backoff, and signals after each (re)connect, as
// notifications may have been missed meanwhile.
func (l *Listener) Run(ctx context.Context) error {
	var retry backoff.Doubling
	for ctx.Err() == nil {
		err := listenOnce(ctx, l.url, l.signal)
		if ctx.Err() != nil {
			return nil
		}
		delay := retry.Next()
		l.log.Debug("outbox listener lost its connection; reconnecting", zap.Error(err), zap.Duration("retry_in", delay))
		backoff.Sleep(ctx, delay)
	}
	return nil
}

func (l *Listener) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

func listenOnce(ctx context.Context, url string, signal func()) error {
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+OutboxChannel); err != nil {
		return err
	}
	signal()
	for {
		if _, err := conn.WaitForNotification(ctx); err != nil {
			return err
		}
		signal()
	}
}
