package app

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/newsfeed/newsfeed/api"
)

// Execute runs the command line and returns the error to print, if any.
// SIGINT and SIGTERM cancel the running command, which then stops gracefully.
func Execute(args []string) error {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	root := NewRootCommand()
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

// NewRootCommand builds the newsfeed command tree.
func NewRootCommand() *cobra.Command {
	var configPath string
	root := &cobra.Command{
		Use:           "newsfeed",
		Short:         "A news-feed backend: fan-out on write with the transactional outbox pattern",
		SilenceErrors: true, // main prints the one line
		SilenceUsage:  true,
	}
	root.PersistentFlags().StringVar(&configPath, "config", "config.yaml", "configuration file (YAML)")
	// A flag that sets a configuration key and is given no value is told in
	// the words of the configuration's errors, as a wrong value is.
	root.SetFlagErrorFunc(keyFlagError)

	// sources are where cmd reads its configuration, with the values of
	// its flags that set keys.
	sources := func(cmd *cobra.Command, flags []FlagValue) ConfigSources {
		return ConfigSources{File: configPath, FileRequired: cmd.Flags().Changed("config"), Environ: os.Environ(), Flags: flags}
	}
	load := func(cmd *cobra.Command, flags []FlagValue) (*Config, error) {
		return LoadConfig(sources(cmd, flags))
	}

	root.AddCommand(
		roleCommand("serve", "Serve the HTTP API", []Role{RoleServe}, false, sources),
		roleCommand("dispatch", "Publish outbox events to the queue", []Role{RoleDispatch}, false, sources),
		roleCommand("work", "Fan posts out to followers' feeds", []Role{RoleWork}, false, sources),
		roleCommand("all", "Apply the schema, then run every role in one process", []Role{RoleServe, RoleDispatch, RoleWork}, true, sources),
		migrateCommand(load),
		tokenCommand(load),
		outboxCommand(load),
		feedCommand(load),
		configCommand(sources),
		versionCommand(),
	)
	// --version prints the same line as the version command.
	root.Version = ReadBuildInfo().String()
	root.SetVersionTemplate("{{.Version}}\n")
	return root
}

// loadFunc reads the configuration of cmd, with the values of its flags
// that set keys.
type loadFunc func(cmd *cobra.Command, flags []FlagValue) (*Config, error)

// sourcesFunc says where cmd reads its configuration.
type sourcesFunc func(cmd *cobra.Command, flags []FlagValue) ConfigSources

func roleCommand(name, short string, roles []Role, migrate bool, sources sourcesFunc) *cobra.Command {
	var dev bool
	var keyFlags []*keyFlag
	cmd := &cobra.Command{
		Use:   name,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			flags := keyFlagValues(keyFlags)
			if dev && os.Getenv("NEWSFEED_LOG_FORMAT") == "" {
				flags = append(flags, FlagValue{Key: "log.format", Value: "console", Flag: "--dev"})
			}
			// The settings, masked and with their sources, are what the
			// operator console shows.
			cfg, settings, _, err := EffectiveConfig(sources(cmd, flags))
			if err != nil {
				return err
			}
			secret := []byte(cfg.Auth.Secret)
			servesAPI := false
			for _, r := range roles {
				servesAPI = servesAPI || r == RoleServe
			}
			if servesAPI && len(secret) == 0 {
				if !dev {
					return errors.New("auth.secret is not set: set it (NEWSFEED_AUTH_SECRET) or pass --dev to use a public development secret")
				}
				secret = []byte(devSecret)
			}
			log, err := NewLogger(cfg)
			if err != nil {
				return err
			}
			defer func() { _ = log.Sync() }()
			ctx := cmd.Context()
			if migrate {
				if _, err := runMigrate(ctx, cfg); err != nil {
					return stoppedOr(ctx, err)
				}
			}
			sys, err := Open(ctx, cfg, log, roles...)
			if err != nil {
				return stoppedOr(ctx, err)
			}
			defer sys.Close()
			sys.Dev = dev
			if dev {
				sys.Banner = cmd.ErrOrStderr()
			}
			sys.Settings = settings
			return sys.Run(ctx, roles, secret)
		},
	}
	if migrate || roles[0] == RoleServe {
		cmd.Flags().BoolVar(&dev, "dev", false, "development mode: console logs, a public token secret when auth.secret is unset, "+
			"POST /dev/token, and the operator console open without admin.token")
	} else {
		cmd.Flags().BoolVar(&dev, "dev", false, "development mode: console logs, and the operator console open without admin.token")
	}
	if migrate || roles[0] == RoleWork {
		keyFlags = append(keyFlags, configFlag(cmd, "concurrency", "fanout.concurrency", "tickets processed at once (fanout.concurrency)"))
	}
	return cmd
}

// keyFlag is a flag that sets a configuration key. It keeps the text it is
// given; the configuration loader reads it as it reads an environment
// variable's, so that a wrong value is refused in the words of every other
// configuration error, naming the flag and the key
// (`flag --concurrency: fanout.concurrency: "abc" is not a whole number`),
// and not in pflag's.
type keyFlag struct {
	key  string
	name string // the flag, "--concurrency"
	typ  string // what --help shows: int, duration, …
	text string
	set  bool
}

// configFlag registers --name on cmd as key's value on the command line;
// --help shows key's default.
func configFlag(cmd *cobra.Command, name, key, usage string) *keyFlag {
	k, known := declared[key]
	if !known {
		panic("configFlag: no configuration key " + key) // a mistake in this file
	}
	typ := k.field.Kind().String()
	switch {
	case k.field.Type() == durationType:
		typ = "duration"
	case k.field.CanInt():
		typ = "int"
	}
	f := &keyFlag{key: key, name: "--" + name, typ: typ}
	cmd.Flags().Var(f, name, usage)
	cmd.Flags().Lookup(name).DefValue = formatValue(k.def)
	return f
}

func (f *keyFlag) String() string { return f.text }

func (f *keyFlag) Set(text string) error {
	f.text, f.set = text, true
	return nil
}

func (f *keyFlag) Type() string { return f.typ }

// keyFlagValues returns the values of the flags that were given.
func keyFlagValues(flags []*keyFlag) []FlagValue {
	var values []FlagValue
	for _, f := range flags {
		if f.set {
			values = append(values, FlagValue{Key: f.key, Value: f.text, Flag: f.name})
		}
	}
	return values
}

// keyFlagError is the error of a command line that cobra cannot parse: for
// a flag that sets a configuration key given no value, one in the words of
// the configuration's errors; any other as pflag has it.
func keyFlagError(_ *cobra.Command, err error) error {
	var missing *pflag.ValueRequiredError
	if errors.As(err, &missing) && missing.GetFlag() != nil {
		if f, ok := missing.GetFlag().Value.(*keyFlag); ok {
			return &ConfigError{Problems: []string{fmt.Sprintf("%s: %s: has no value (give one, like %s=%s)",
				ConfigSource{Kind: SourceFlag, Name: f.name}, f.key, f.name, formatValue(declared[f.key].def))}}
		}
	}
	return err
}

// stoppedOr returns nil when the process was asked to stop (SIGTERM while it
// was still waiting for its database at start-up is a graceful stop), else err.
func stoppedOr(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func tokenCommand(load loadFunc) *cobra.Command {
	var user int64
	var ttl time.Duration
	var dev bool
	cmd := &cobra.Command{
		Use:   "token --user ID [--ttl 24h]",
		Short: "Print a bearer token for a user, signed with auth.secret",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load(cmd, nil)
			if err != nil {
				return err
			}
			secret := cfg.Auth.Secret
			if secret == "" {
				if !dev {
					return errors.New("auth.secret is not set: set it (NEWSFEED_AUTH_SECRET) or pass --dev for the development secret")
				}
				secret = devSecret
			}
			if user <= 0 {
				return errors.New("--user must be a positive user id")
			}
			token, err := api.IssueToken([]byte(secret), user, ttl)
			if err != nil {
				return fmt.Errorf("--ttl: %w", err)
			}
			fmt.Fprintln(cmd.OutOrStdout(), token)
			return nil
		},
	}
	cmd.Flags().Int64Var(&user, "user", 0, "user id (the token's sub)")
	cmd.Flags().DurationVar(&ttl, "ttl", 24*time.Hour, "how long the token is valid")
	cmd.Flags().BoolVar(&dev, "dev", false, "sign with the development secret when auth.secret is unset")
	_ = cmd.MarkFlagRequired("user")
	return cmd
}
