package app

import (
	"context"
	"fmt"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/newsfeed/newsfeed/store"
)

func migrateCommand(load loadFunc) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the schema's migrations (idempotent; safe to run on every deploy and concurrently)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load(cmd, nil)
			if err != nil {
				return err
			}
			report, err := runMigrate(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			if len(report.Applied) == 0 {
				fmt.Fprintln(cmd.ErrOrStderr(), "schema applied (already current: nothing ran, no table locked)")
				return nil
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "schema applied (%d migrations ran: %s; %d retries after lock timeouts)\n",
				len(report.Applied), strings.Join(report.Applied, ", "), report.Retries)
			if len(report.Dropped) > 0 {
				fmt.Fprintf(cmd.ErrOrStderr(), "INVALID indexes dropped and built again: %s\n", strings.Join(report.Dropped, ", "))
			}
			return nil
		},
	}
	cmd.AddCommand(migrateStatusCommand(load))
	return cmd
}

func migrateStatusCommand(load loadFunc) *cobra.Command {
	return &cobra.Command{
		Use:   "status",
		Short: "Print each migration, applied (and when) or pending",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := load(cmd, nil)
			if err != nil {
				return err
			}
			pool, err := store.Connect(cmd.Context(), cfg.Database.URL, 2, cfg.Database.ConnectWait)
			if err != nil {
				return fmt.Errorf("database.url: %w", err)
			}
			defer pool.Close()
			states, err := store.MigrationStatus(cmd.Context(), pool)
			if err != nil {
				return err
			}
			w := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(w, "VERSION\tMIGRATION\tSTATE\tAPPLIED AT")
			for _, s := range states {
				state, at := "pending", "-"
				if s.Applied {
					state, at = "applied", s.AppliedAt.Format(time.RFC3339)
				}
				fmt.Fprintf(w, "%d\t%s\t%s\t%s\n", s.Version, s.Name, state, at)
			}
			return w.Flush()
		},
	}
}

// runMigrate creates the database if it is missing, then applies the
// migrations and says what ran.
func runMigrate(ctx context.Context, cfg *Config) (store.MigrateReport, error) {
	pool, err := store.Connect(ctx, cfg.Database.URL, 2, cfg.Database.ConnectWait)
	if store.IsDatabaseMissing(err) {
		if err := store.CreateDatabase(ctx, cfg.Database.URL); err != nil {
			return store.MigrateReport{}, fmt.Errorf("database.url: %w", err)
		}
		pool, err = store.Connect(ctx, cfg.Database.URL, 2, cfg.Database.ConnectWait)
	}
	if err != nil {
		return store.MigrateReport{}, fmt.Errorf("database.url: %w", err)
	}
	defer pool.Close()
	return store.MigrateWith(ctx, pool, store.MigrateOptions{})
}
