package store_test

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/health"
	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// muteProxy forwards TCP to target until muted; then it keeps every
// connection open and drops what flows either way: a silent partition.
type muteProxy struct {
	addr  string
	ln    net.Listener
	muted atomic.Bool

	mu    sync.Mutex
	conns []net.Conn
}

func newMuteProxy(t *testing.T, target string) *muteProxy {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &muteProxy{addr: ln.Addr().String(), ln: ln}
	go func() {
		for {
			in, err := ln.Accept()
			if err != nil {
				return
			}
			out, err := net.Dial("tcp", target)
			if err != nil {
				_ = in.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, in, out)
			p.mu.Unlock()
			go p.pipe(out, in)
			go p.pipe(in, out)
		}
	}()
	return p
}

func (p *muteProxy) pipe(dst io.Writer, src io.Reader) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			return
		}
		if !p.muted.Load() {
			if _, err := dst.Write(buf[:n]); err != nil {
				return
			}
		}
	}
}

// close ends the proxy and every connection through it.
func (p *muteProxy) close() {
	_ = p.ln.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		_ = c.Close()
	}
}

// TestDialBoundsStatements: a pool that Dial opens with a StatementTimeout
// bounds a statement whose caller set no deadline on both sides — the
// server cancels it at statement_timeout (57014, an outage: retry later),
// and with the server silent the caller gives up a second later, pgx
// closing the connection — and the pool serves again once it answers.
func TestDialBoundsStatements(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(testenv.NewDatabaseURL(t))
	require.NoError(t, err)
	p := newMuteProxy(t, u.Host)
	u.Host = p.addr
	pool, err := store.Dial(t.Context(), store.PoolConfig{URL: u.String(), MaxConns: 2, ConnectWait: 5 * time.Second,
		StatementTimeout: time.Second})
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	t.Cleanup(p.close) // first: what pgx still says to the silent server ends with it
	ctx := context.Background()

	var setting string
	require.NoError(t, pool.QueryRow(ctx, "SHOW statement_timeout").Scan(&setting))
	require.Equal(t, "1s", setting)
	require.NoError(t, pool.QueryRow(ctx, "SHOW jit").Scan(&setting))
	require.Equal(t, "off", setting, "no JIT compilation for short queries")
	_, err = pool.Exec(ctx, "SELECT pg_sleep(3)")
	var pgErr *pgconn.PgError
	require.ErrorAs(t, err, &pgErr)
	require.Equal(t, "57014", pgErr.Code, "cancelled by statement_timeout")
	require.True(t, health.IsOutage(err))

	p.muted.Store(true)
	start := time.Now()
	_, err = pool.Exec(ctx, "SELECT 1")
	took := time.Since(start)
	require.Error(t, err)
	require.True(t, health.IsOutage(err), "%v", err)
	require.Less(t, took, 3*time.Second, "statement_timeout, a second of grace, and some slack: %v", err)
	t.Logf("with the server silent, gave up after %s: %v", took.Round(time.Millisecond), err)

	p.muted.Store(false)
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(ctx, time.Second)
		defer cancel()
		return pool.Ping(ctx) == nil
	}, 10*time.Second, 50*time.Millisecond, "the pool serves again")
}
