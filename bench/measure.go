package bench

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// closedLoop runs fn from n clients for d and returns operations per second
// and each operation's latency. Each client sends its next request when the
// last one returned.
func closedLoop(ctx context.Context, n int, d time.Duration, fn func(ctx context.Context, client, i int) error) (float64, []time.Duration, error) {
	// Clients start no call after d, and the call in flight then finishes:
	// cut off, a call slower than d (a filtered read on a loaded machine)
	// would never count, and the stage would measure nothing.
	deadline := time.Now().Add(d)
	var mu sync.Mutex
	var all []time.Duration
	var firstErr error
	var wg sync.WaitGroup
	start := time.Now()
	for c := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var mine []time.Duration
			for i := 0; ctx.Err() == nil && time.Now().Before(deadline); i++ {
				t := time.Now()
				if err := fn(ctx, c, i); err != nil {
					if ctx.Err() == nil {
						mu.Lock()
						firstErr = cmpErr(firstErr, err)
						mu.Unlock()
					}
					break
				}
				mine = append(mine, time.Since(t))
			}
			mu.Lock()
			all = append(all, mine...)
			mu.Unlock()
		}()
	}
	wg.Wait()
	return float64(len(all)) / time.Since(start).Seconds(), all, firstErr
}

func cmpErr(a, b error) error {
	if a != nil {
		return a
	}
	return b
}

// watchConn is a connection of the bench's own to PostgreSQL, for the
// queries that watch the system rather than drive it: polled every 10 ms
// while a stage waits, they cost the server about 0.1 µs a fan-out entry,
// which is the bench's, not the product's. pid is its backend's.
type watchConn struct {
	mu   sync.Mutex
	conn *pgx.Conn
	pid  int
}

// queryRow runs one query on the watch connection, made on first use.
func (r *runner) watchRow(ctx context.Context, sql string, dest ...any) error {
	w := &r.watch
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.conn == nil {
		conn, err := pgx.ConnectConfig(ctx, r.pool.Config().ConnConfig.Copy())
		if err != nil {
			return fmt.Errorf("the bench's watch connection: %w", err)
		}
		var pid int32
		if err := conn.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&pid); err != nil {
			_ = conn.Close(ctx)
			return fmt.Errorf("the bench's watch connection: %w", err)
		}
		w.conn, w.pid = conn, int(pid)
	}
	return w.conn.QueryRow(ctx, sql).Scan(dest...)
}

// watchPID is the watch connection's backend, 0 before it is made.
func (r *runner) watchPID() int {
	r.watch.mu.Lock()
	defer r.watch.mu.Unlock()
	return r.watch.pid
}

// closeWatch closes the watch connection.
func (r *runner) closeWatch() {
	r.watch.mu.Lock()
	defer r.watch.mu.Unlock()
	if r.watch.conn != nil {
		_ = r.watch.conn.Close(context.Background())
		r.watch.conn, r.watch.pid = nil, 0
	}
}

// drain waits until the outbox has nothing unfinished.
func (r *runner) drain(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var open int
		if err := r.watchRow(ctx,
			`SELECT count(*) FROM outbox WHERE status IN ('pending','publishing','published')`, &open); err != nil {
			return err
		}
		if open == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("outbox not drained after %s: %d open", timeout, open)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(10 * time.Millisecond):
		}
	}
}

func (r *runner) lastOutboxID(ctx context.Context) (int64, error) {
	var id int64
	err := r.watchRow(ctx, `SELECT COALESCE(max(id), 0) FROM outbox`, &id)
	return id, err
}

// timeOnePost posts once as author and returns the time from the post's
// commit to the end of its fan-out (chunks included), on the database clock.
func (r *runner) timeOnePost(ctx context.Context, author int64) (time.Duration, error) {
	after, err := r.lastOutboxID(ctx)
	if err != nil {
		return 0, err
	}
	if err := r.post(ctx, author); err != nil {
		return 0, err
	}
	for {
		var status string
		var secs float64
		err := r.pool.QueryRow(ctx, `SELECT status, COALESCE(extract(epoch FROM finished_at - created_at)::float8, 0)
			FROM outbox WHERE id > $1 AND event_type = 'post.created' ORDER BY id LIMIT 1`, after).Scan(&status, &secs)
		if err != nil {
			return 0, err
		}
		switch status {
		case "done":
			return time.Duration(secs * float64(time.Second)), nil
		case "dead":
			return 0, errors.New("the fan-out died")
		}
		select {
		case <-ctx.Done():
			return 0, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// rawZADD writes n entries with plain pipelined ZADD, PageSize per pipeline,
// from clients goroutines, spread over as many throw-away sorted sets as the
// fan-out it stands for writes feeds, and returns how long the writes took
// (the clean-up after is not timed). The sets start from nothing, in the
// encoding Redis gives them (a listpack while they are small).
func (r *runner) rawZADD(ctx context.Context, n, keys, clients int) (time.Duration, error) {
	sets := r.rawSets("raw", keys)
	took, err := sets.write(ctx, n, clients, randomFirst())
	if err != nil {
		return 0, err
	}
	return took, sets.drop(ctx)
}

// rawOnePost is the time to write one post's entries for n followers with
// raw pipelined ZADD, one pipeline after the other, as one fan-out does.
func (r *runner) rawOnePost(ctx context.Context, n int) (time.Duration, error) {
	return r.rawZADD(ctx, n, n, 1)
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	return s[len(s)/2]
}

func humanInt(n int) string {
	switch {
	case n >= 1_000_000 && n%1_000_000 == 0:
		return strconv.Itoa(n/1_000_000) + "M"
	case n >= 1000 && n%1000 == 0:
		return strconv.Itoa(n/1000) + "k"
	}
	return strconv.Itoa(n)
}
