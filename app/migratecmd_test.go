package app

import (
	"bytes"
	"context"
	"fmt"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// TestMigrateStatus: `migrate status` prints each migration, pending, then
// applied with when; `migrate` says what it ran, then that nothing ran.
func TestMigrateStatus(t *testing.T) {
	t.Parallel()
	// A database that does not exist yet, named so that testenv drops it
	// if the run is killed: migrate creates it.
	u, err := url.Parse(testenv.DatabaseURL())
	require.NoError(t, err)
	name := fmt.Sprintf("nf_test_%d_migstatus%d", time.Now().Unix(), time.Now().UnixNano()%1_000_000)
	u.Path = "/" + name
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, testenv.DatabaseURL())
		require.NoError(t, err)
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
		require.NoError(t, err)
	})
	config := writeConfig(t, fmt.Sprintf("database:\n  url: %q\n  connect_wait: 1s\n", u.String()))
	run := func(args ...string) (stdout, stderr string) {
		t.Helper()
		root := NewRootCommand()
		var out, errOut bytes.Buffer
		root.SetOut(&out)
		root.SetErr(&errOut)
		root.SetArgs(append([]string{"--config", config}, args...))
		require.NoError(t, root.Execute(), "%v: %s", args, errOut.String())
		return out.String(), errOut.String()
	}

	_, err = runCommand(t, fmt.Sprintf("database:\n  url: %q\n  connect_wait: 1s\n", u.String()), "migrate", "status")
	require.ErrorContains(t, err, "database.url", "status creates no database")

	require.NoError(t, store.CreateDatabase(t.Context(), u.String()))
	stdout, stderr := run("migrate", "status")
	require.Empty(t, stderr)
	require.Regexp(t, regexp.MustCompile(`^VERSION +MIGRATION +STATE +APPLIED AT\n`+
		`1 +00001_initial\.sql +pending +-\n`+
		`(\d+ +\d{5}_\w+\.sql +pending +-\n)*$`), stdout)

	_, stderr = run("migrate")
	require.Regexp(t, `^schema applied \(\d+ migrations ran: 00001_initial\.sql(, \d{5}_\w+\.sql)*; 0 retries after lock timeouts\)\n$`, stderr)

	stdout, stderr = run("migrate", "status")
	require.Empty(t, stderr)
	require.Regexp(t, regexp.MustCompile(`^VERSION +MIGRATION +STATE +APPLIED AT\n`+
		`1 +00001_initial\.sql +applied +\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ\n`+
		`(\d+ +\d{5}_\w+\.sql +applied +\S+\n)*$`), stdout)

	_, stderr = run("migrate")
	require.Equal(t, "schema applied (already current: nothing ran, no table locked)\n", stderr)
}
