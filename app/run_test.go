package app

import (
	"context"
	"net"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/probe"
	"github.com/newsfeed/newsfeed/internal/testenv"
)

// TestHealthyMeansListening: once /healthz on metrics.addr answers, every
// listener of the process is bound — a client that waited for health and
// then connects to the API is never refused. (The ops server used to start
// first: under load, health came before the API port and an e2e test that
// dialed at once was refused.)
func TestHealthyMeansListening(t *testing.T) {
	t.Setenv("NEWSFEED_DATABASE_URL", testenv.NewDatabaseURL(t))
	t.Setenv("NEWSFEED_REDIS_URL", testenv.NewRedisDB(t))
	t.Setenv("NEWSFEED_LOG_LEVEL", "error")
	t.Setenv("NEWSFEED_AUTH_SECRET", "test-secret-test-secret-test-secret")
	t.Setenv("NEWSFEED_SHUTDOWN_DRAIN", "0s")
	for range 5 {
		metricsAddr, err := probe.FreeAddr()
		require.NoError(t, err)
		httpAddr, err := probe.FreeAddr()
		require.NoError(t, err)
		t.Setenv("NEWSFEED_METRICS_ADDR", metricsAddr)
		t.Setenv("NEWSFEED_HTTP_ADDR", httpAddr)

		ctx, cancel := context.WithCancel(context.Background())
		root := NewRootCommand()
		root.SetArgs([]string{"serve"})
		done := make(chan error, 1)
		go func() { done <- root.ExecuteContext(ctx) }()

		healthy := false
		for deadline := time.Now().Add(30 * time.Second); !healthy && time.Now().Before(deadline); {
			resp, err := http.Get("http://" + metricsAddr + "/healthz")
			if err == nil {
				resp.Body.Close()
				healthy = resp.StatusCode == http.StatusOK
			}
		}
		require.True(t, healthy, "serve never became healthy")
		conn, err := net.Dial("tcp", httpAddr)
		require.NoError(t, err, "healthy, yet the API does not listen")
		conn.Close()

		cancel()
		require.NoError(t, <-done)
	}
}
