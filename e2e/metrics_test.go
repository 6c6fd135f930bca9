package e2e

import (
	"bytes"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// What Prometheus 3 asks for, in its order of preference.
const prometheusAccept = "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8," +
	"application/openmetrics-text;version=0.0.1;q=0.9,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.8," +
	"text/plain;version=0.0.4;q=0.7,*/*;q=0.6"

// TestMetricsPassPromtool: what each role exports after doing its work passes
// `promtool check metrics` (Prometheus's linter of names, types, help and
// units), and a scraper that prefers OpenMetrics, as Prometheus does, gets the
// Prometheus text format. In OpenMetrics a counter's family is named without
// its _total, so the counter newsfeed_outbox_dead_total and the gauge
// newsfeed_outbox_dead, both in the contract, would be one family twice (see
// docs/OPERATIONS.md, Metrics and health); the text format keeps them apart.
func TestMetricsPassPromtool(t *testing.T) {
	t.Parallel()
	promtool := testenv.Promtool(t)
	c := newCluster(t)
	serve, dispatch, work := c.start("serve"), c.start("dispatch"), c.start("work")

	// Work for every role: a feed read, a follow, a post delivered, an
	// unknown route.
	reader, author := serve.client(2), serve.client(1)
	reader.firstPage(1) // a feed that was read is written by the fan-out
	reader.follow(1)
	p := author.post("measured")
	require.Eventually(t, func() bool {
		items := reader.firstPage(1)
		return len(items) == 1 && items[0].ID == p.ID
	}, 30*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { return work.metric("newsfeed_delivery_seconds_count") >= 1 },
		30*time.Second, 20*time.Millisecond)
	status, _ := reader.do("GET", "/v1/nope", nil)
	require.Equal(t, http.StatusNotFound, status)

	for _, target := range []struct{ name, addr string }{
		{"serve on metrics.addr", serve.metricsAddr},
		{"serve on http.addr", serve.httpAddr},
		{"dispatch", dispatch.metricsAddr},
		{"work", work.metricsAddr},
	} {
		t.Run(target.name, func(t *testing.T) {
			resp, body := get(t, "http://"+target.addr+"/metrics", "Accept", prometheusAccept)
			require.Equal(t, http.StatusOK, resp.StatusCode)
			require.Regexp(t, `^text/plain; version=0\.0\.4;`, resp.Header.Get("Content-Type"), "not OpenMetrics")
			require.Contains(t, string(body), "\n# TYPE newsfeed_outbox_dead gauge\n")
			require.Contains(t, string(body), "\n# TYPE newsfeed_outbox_dead_total counter\n")

			check := exec.Command(promtool, "check", "metrics")
			check.Stdin = bytes.NewReader(body)
			out, err := check.CombinedOutput()
			require.NoError(t, err, "promtool check metrics:\n%s", out)
			require.Empty(t, string(out), "promtool check metrics found problems")
		})
	}
}
