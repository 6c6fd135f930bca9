package probe_test

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/newsfeed/newsfeed/internal/probe"
)

func TestFreeAddrCanBeListenedOn(t *testing.T) {
	addr, err := probe.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen on %s: %v", addr, err)
	}
	_ = ln.Close()
}

// TestWaitHealthyWaitsForOK: answers other than 200 are waited through.
func TestWaitHealthyWaitsForOK(t *testing.T) {
	var calls atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
			return
		}
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	defer srv.Close()
	if err := probe.WaitHealthy(context.Background(), srv.URL); err != nil {
		t.Fatal(err)
	}
	if n := calls.Load(); n != 3 {
		t.Fatalf("%d calls to /healthz, want 3", n)
	}
}

// TestWaitHealthyEndsWithContext: nothing listens, and the caller gives up
// long before HealthyWithin.
func TestWaitHealthyEndsWithContext(t *testing.T) {
	addr, err := probe.FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	if err := probe.WaitHealthy(ctx, "http://"+addr); err == nil {
		t.Fatal("healthy with nothing listening")
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Fatalf("gave up after %s, not when its context ended", took)
	}
}
