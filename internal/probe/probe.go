// Package probe is what the bench does to the servers it starts and the
// end-to-end tests do to the processes they start: find a free local address
// for one to listen on, and wait until it answers /healthz.
package probe

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"
)

// HealthyWithin is how long WaitHealthy waits for a server.
const HealthyWithin = 30 * time.Second

// FreeAddr returns a 127.0.0.1 address whose port nothing listens on (at
// the time of the call).
func FreeAddr() (string, error) {
	var lc net.ListenConfig
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// WaitHealthy polls baseURL + "/healthz" until it answers 200 OK, for at
// most HealthyWithin, and gives up early when ctx ends (a process that
// exited, a command interrupted).
func WaitHealthy(ctx context.Context, baseURL string) error {
	deadline := time.Now().Add(HealthyWithin)
	for time.Now().Before(deadline) {
		req, err := http.NewRequestWithContext(ctx, "GET", baseURL+"/healthz", nil)
		if err != nil {
			return err
		}
		if resp, err := http.DefaultClient.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s did not become healthy: %w", baseURL, ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
	return fmt.Errorf("%s did not become healthy", baseURL)
}
