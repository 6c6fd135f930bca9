package live

import (
	"context"
	"io"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// muteProxy forwards TCP to target until muted; then it keeps every
// connection open and drops what flows either way: a silent partition.
type muteProxy struct {
	addr  string
	muted atomic.Bool
}

func newMuteProxy(t *testing.T, target string) *muteProxy {
	t.Helper()
	var lc net.ListenConfig
	ln, err := lc.Listen(t.Context(), "tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &muteProxy{addr: ln.Addr().String()}
	t.Cleanup(func() { _ = ln.Close() })
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
			t.Cleanup(func() { _ = in.Close(); _ = out.Close() })
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

// TestReceiveEndsWhenRedisIsSilent: a subscription whose Redis goes silent
// (no reset, no reply) is given up within two quiet periods — heard
// nothing, pinged, heard nothing again — so that listen subscribes anew
// instead of waiting, deaf, until the connection breaks by itself (which a
// silent partition may never do). A quiet subscription of a Redis that
// answers is kept.
func TestReceiveEndsWhenRedisIsSilent(t *testing.T) {
	t.Parallel()
	real, prefix := testenv.NewRedis(t)
	p := newMuteProxy(t, real.Options().Addr)
	opts := *real.Options()
	opts.Addr, opts.ContextTimeoutEnabled, opts.MaxRetries = p.addr, true, -1
	rdb := redis.NewClient(&opts)
	t.Cleanup(func() { _ = rdb.Close() })
	channel := prefix + "silent"
	ps := rdb.SSubscribe(t.Context(), channel)
	t.Cleanup(func() { _ = ps.Close() })

	subscribed := make(chan struct{}, 1)
	messages := make(chan string, 1)
	done := make(chan error, 1)
	ctx, cancel := context.WithCancel(t.Context())
	t.Cleanup(cancel)
	go func() {
		done <- receive(ctx, ps, func() { subscribed <- struct{}{} }, func(m string) { messages <- m })
	}()
	<-subscribed
	time.Sleep(2*quietFor + time.Second) // quiet, but answering pings
	require.NoError(t, real.SPublish(t.Context(), channel, "hello").Err())
	require.Equal(t, "hello", <-messages, "a quiet subscription is kept")

	p.muted.Store(true)
	start := time.Now()
	select {
	case err := <-done:
		require.ErrorIs(t, err, errNoPong)
		t.Logf("given up %s after Redis went silent", time.Since(start).Round(time.Millisecond))
	case <-time.After(2*quietFor + 3*time.Second):
		t.Fatal("a subscription to a silent Redis is never given up")
	}
}
