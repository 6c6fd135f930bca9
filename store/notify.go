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

// Run sends the wake-ups until ctx ends. A lost one costs at most a poll interval.
func (n *Notifier) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-n.pending:
		}
		if _, err := n.pool.Exec(ctx, "SELECT pg_notify($1, '')", OutboxChannel); err != nil && ctx.Err() == nil {
			n.log.Debug("outbox notify failed; dispatchers will poll", zap.Error(err))
		}
		select { // debounce: coalesce what arrives in the next few milliseconds
		case <-ctx.Done():
			return
		case <-time.After(2 * time.Millisecond):
		}
	}
}

// Listen LISTENs on OutboxChannel on its own connection (not from the pool)
// and signals on the returned channel, until ctx ends. It reconnects after
// failures and signals after each reconnect, as notifications may have been
// missed meanwhile.
func Listen(ctx context.Context, url string, log *zap.Logger) <-chan struct{} {
	wake := make(chan struct{}, 1)
	signal := func() {
		select {
		case wake <- struct{}{}:
		default:
		}
	}
	go func() {
		var retry backoff.Doubling
		for ctx.Err() == nil {
			err := listenOnce(ctx, url, signal)
			if ctx.Err() != nil {
				return
			}
			delay := retry.Next()
			log.Debug("outbox listener lost its connection; reconnecting", zap.Error(err), zap.Duration("retry_in", delay))
			backoff.Sleep(ctx, delay)
		}
	}()
	return wake
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
