package app

import (
	"encoding/json"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/spf13/cobra"
)

func configCommand(sources sourcesFunc) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Check the configuration"}
	var asJSON bool
	check := &cobra.Command{
		Use:   "check [--json]",
		Short: "Validate the configuration as every role does, and print each key's value (secrets masked) and where it came from",
		Long: `check reads the configuration as every command does (defaults, the file, NEWSFEED_
environment variables), validates it as every role does at start, and prints every key
with its effective value and its source: default, the config file, or the environment
variable. Secrets are masked: keys whose names say so (auth.secret, any *token*,
*password*, *secret*, *headers*), passwords in URLs and secret parameters of connection
strings. A bad configuration exits 1 with one line naming each wrong key and its source.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, settings, ignored, err := EffectiveConfig(sources(cmd, nil))
			if err != nil {
				return err
			}
			var warnings []string
			for _, name := range ignored {
				warnings = append(warnings, name+" names no configuration key; it is ignored")
			}
			if cfg.Auth.Secret == "" {
				warnings = append(warnings, "auth.secret is not set: serve and all refuse to start without it (except with --dev)")
			}
			for _, w := range warnings {
				fmt.Fprintln(cmd.ErrOrStderr(), "warning: "+w)
			}
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(struct {
					Settings   []Setting `json:"settings"`
					IgnoredEnv []string  `json:"ignored_env"`
				}{settings, append([]string{}, ignored...)})
			}
			return writeSettings(cmd.OutOrStdout(), settings)
		},
	}
	check.Flags().BoolVar(&asJSON, "json", false, `one JSON object, for scripts: {"settings": [{"key", "value", "source": {"kind", "name"}}], "ignored_env": [...]}`)
	cmd.AddCommand(check)
	return cmd
}

func writeSettings(w io.Writer, settings []Setting) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tVALUE\tSOURCE")
	for _, s := range settings {
		value := s.Value
		if value == "" {
			value = `""`
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Key, value, s.Source)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintln(w, "configuration valid")
	return err
}
