package app

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// runCommand runs the command line args with an empty configuration file
// and returns what it wrote and the error it ends with (what main prints
// after "newsfeed: ").
func runCommand(t *testing.T, file string, args ...string) (string, error) {
	t.Helper()
	root := NewRootCommand()
	var out bytes.Buffer
	root.SetOut(&out)
	root.SetErr(&out)
	root.SetArgs(append([]string{"--config", writeConfig(t, file)}, args...))
	err := root.Execute()
	return out.String(), err
}

// TestFlagErrorsNameKeyAndSource: a flag that sets a configuration key is
// read as the configuration's other sources are: a wrong value is refused
// in our words, naming the flag and the key, on one line, with any other
// problem of the configuration, before anything is started.
func TestFlagErrorsNameKeyAndSource(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		file string
		args []string
		want string
	}{
		{args: []string{"work", "--concurrency", "abc"}, want: `flag --concurrency: fanout.concurrency: "abc" is not a whole number`},
		{args: []string{"all", "--concurrency=1.5"}, want: `flag --concurrency: fanout.concurrency: "1.5" is not a whole number`},
		{args: []string{"work", "--concurrency", "99999999999999999999"}, want: `flag --concurrency: fanout.concurrency: "99999999999999999999" is too large`},
		{args: []string{"work", "--concurrency="}, want: `flag --concurrency: fanout.concurrency: "" is not a whole number`},
		{args: []string{"work", "--concurrency"}, want: `flag --concurrency: fanout.concurrency: has no value (give one, like --concurrency=64)`},
		{args: []string{"work", "--concurrency", "0"}, want: `flag --concurrency: fanout.concurrency: must be positive, got 0`},
		{
			file: "feed:\n  max_len: lots\n", args: []string{"work", "--concurrency", "abc"},
			want: `: feed.max_len: "lots" is not a whole number; flag --concurrency: fanout.concurrency: "abc" is not a whole number`,
		},
	} {
		out, err := runCommand(t, tc.file, tc.args...)
		require.Error(t, err, "%q", tc.args)
		require.True(t, strings.HasSuffix(err.Error(), tc.want), "%q:\n got %s\nwant …%s", tc.args, err, tc.want)
		if tc.file == "" {
			require.Equal(t, tc.want, err.Error(), "%q", tc.args)
		}
		var cerr *ConfigError
		require.True(t, errors.As(err, &cerr), "%q: a *ConfigError: %v", tc.args, err)
		require.NotContains(t, err.Error(), "\n")
		require.NotContains(t, err.Error(), "invalid argument", "not in pflag's words")
		require.Empty(t, out, "%q: no usage, no second line", tc.args)
	}

	// pflag's own words stay for flags that set no key.
	_, err := runCommand(t, "", "token", "--user", "abc")
	require.ErrorContains(t, err, `invalid argument "abc" for "--user" flag`)
}

// TestKeyFlags: a flag that sets a key is shown with the key's type and
// default, and its text reaches the key, beating the environment.
func TestKeyFlags(t *testing.T) {
	t.Parallel()
	for _, role := range []string{"work", "all"} {
		help, err := runCommand(t, "", role, "--help")
		require.NoError(t, err)
		require.Regexp(t, `--concurrency int +tickets processed at once \(fanout\.concurrency\) \(default 64\)`, help)

		root := NewRootCommand()
		cmd, _, err := root.Find([]string{role})
		require.NoError(t, err)
		require.NoError(t, cmd.ParseFlags([]string{"--concurrency", " 12 "}))
		flag, ok := cmd.Flags().Lookup("concurrency").Value.(*keyFlag)
		require.True(t, ok)
		cfg, err := LoadConfig(ConfigSources{
			Environ: []string{"NEWSFEED_FANOUT_CONCURRENCY=3"},
			Flags:   keyFlagValues([]*keyFlag{flag}),
		})
		require.NoError(t, err)
		require.Equal(t, 12, cfg.Fanout.Concurrency, "the flag's text, read as the environment's is")
	}
	require.Nil(t, keyFlagValues([]*keyFlag{{key: "fanout.concurrency", name: "--concurrency"}}), "a flag not given sets nothing")
}
