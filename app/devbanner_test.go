package app

import (
	"bytes"
	"context"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/probe"
)

// lockedBuffer is a bytes.Buffer that a process's goroutines may write
// while the test reads it.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// TestDevBannerSaysWhereToGo: `all --dev` prints, once it listens, the web
// app's URL, the console's URL and the command that makes a token; each of
// them works as printed.
func TestDevBannerSaysWhereToGo(t *testing.T) {
	consoleEnv(t)
	t.Setenv("NEWSFEED_AUTH_SECRET", "") // the development secret, as make run has it
	metricsAddr, err := probe.FreeAddr()
	require.NoError(t, err)
	httpAddr, err := probe.FreeAddr()
	require.NoError(t, err)
	t.Setenv("NEWSFEED_METRICS_ADDR", metricsAddr)
	t.Setenv("NEWSFEED_HTTP_ADDR", httpAddr)

	var stderr lockedBuffer
	ctx, cancel := context.WithCancel(context.Background())
	root := NewRootCommand()
	root.SetArgs([]string{"all", "--dev"})
	root.SetErr(&stderr)
	done := make(chan error, 1)
	go func() { done <- root.ExecuteContext(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})

	webApp := "  web app:           http://" + httpAddr + "/  (sign in with any user id)\n"
	console := "  operator console:  http://" + metricsAddr + "/admin  (open without a token)\n"
	token := "  a token for curl:  newsfeed token --dev --user 1\n"
	require.Eventually(t, func() bool { return strings.Contains(stderr.String(), token) },
		time.Minute, 20*time.Millisecond, "the banner, once the process listens: %q", stderr.String())
	banner := stderr.String()
	require.Contains(t, banner, "newsfeed is running in development mode (--dev); Ctrl-C stops it.\n")
	require.Contains(t, banner, webApp)
	require.Contains(t, banner, console)
	require.Equal(t, 1, strings.Count(banner, "web app:"), "printed once")

	status, body := get(t, "http://"+httpAddr+"/", "")
	require.Equal(t, http.StatusOK, status, "the web app")
	require.Contains(t, body, "<html")
	status, body = get(t, "http://"+metricsAddr+"/admin/api/overview", "")
	require.Equal(t, http.StatusOK, status, "the console, open: %s", body)

	out, err := runCommand(t, "", "token", "--dev", "--user", "1")
	require.NoError(t, err, out)
	bearer := strings.TrimSpace(out)
	status, body = get(t, "http://"+httpAddr+"/v1/feed", bearer)
	require.Equal(t, http.StatusOK, status, "the token the banner says how to get: %s", body)
}

// TestDevBannerOfEachRole: a role without the API names only its console,
// and says when there is none or when it needs admin.token; with an
// auth.secret the token command needs no --dev.
func TestDevBannerOfEachRole(t *testing.T) {
	t.Parallel()
	cfg, err := LoadConfig(ConfigSources{})
	require.NoError(t, err)

	work := devBanner(cfg, []Role{RoleWork}, false)
	require.Contains(t, work, "  operator console:  http://localhost:9090/admin  (open without a token)\n")
	require.NotContains(t, work, "web app")
	require.NotContains(t, work, "token --")

	serve := devBanner(cfg, []Role{RoleServe}, false)
	require.Contains(t, serve, "  web app:           http://localhost:8080/  (sign in with any user id)\n")
	require.Contains(t, serve, "  a token for curl:  newsfeed token --user 1\n", "signed with auth.secret: no --dev")

	withToken := *cfg
	withToken.Admin.Token = consoleToken
	require.Contains(t, devBanner(&withToken, []Role{RoleDispatch}, false), "/admin  (paste admin.token)\n")

	shared := *cfg
	shared.Metrics.Addr = shared.HTTP.Addr
	require.Contains(t, devBanner(&shared, []Role{RoleServe}, true), "  operator console:  off (metrics.addr is the API's address)\n")
	none := *cfg
	none.Metrics.Addr = ""
	require.Contains(t, devBanner(&none, []Role{RoleWork}, true), "  operator console:  off (metrics.addr is empty)\n")
}
