package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/newsfeed/newsfeed/admin"
	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/store"
)

func outboxCommand(load loadFunc) *cobra.Command {
	cmd := &cobra.Command{Use: "outbox", Short: "Inspect and repair the outbox"}
	withStore := func(cmd *cobra.Command, fn func(ctx context.Context, db *store.DB) error) error {
		cfg, err := load(cmd, nil)
		if err != nil {
			return err
		}
		pool, err := store.Connect(cmd.Context(), cfg.Database.URL, 2, cfg.Database.ConnectWait)
		if err != nil {
			return fmt.Errorf("database.url: %w", err)
		}
		defer pool.Close()
		return fn(cmd.Context(), store.New(pool, nil))
	}
	stats := &cobra.Command{
		Use:   "stats",
		Short: "Print outbox counts as JSON: pending, in flight, dead, oldest age",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withStore(cmd, func(ctx context.Context, db *store.DB) error {
				s, err := db.OutboxStats(ctx)
				if err != nil {
					return err
				}
				out := map[string]any{
					"pending": s.Pending, "in_flight": s.InFlight, "dead": s.Dead,
					"oldest_pending_age_seconds": s.OldestPendingAge.Seconds(),
				}
				enc := json.NewEncoder(cmd.OutOrStdout())
				return enc.Encode(out)
			})
		},
	}
	cmd.AddCommand(stats, deadCommand(withStore), retryDeadCommand(withStore))
	return cmd
}

type withStoreFunc func(cmd *cobra.Command, fn func(ctx context.Context, db *store.DB) error) error

func retryDeadCommand(withStore withStoreFunc) *cobra.Command {
	var id int64
	retry := &cobra.Command{
		Use:   "retry-dead [--id N]",
		Short: "Make dead events pending again (all, or one with --id)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			one := cmd.Flags().Changed("id")
			if one && id <= 0 {
				return errors.New("--id must be a positive outbox id")
			}
			return withStore(cmd, func(ctx context.Context, db *store.DB) error {
				if !one {
					n, err := db.RetryDead(ctx, 0)
					if err != nil {
						return err
					}
					fmt.Fprintf(cmd.OutOrStdout(), "%d dead event(s) made pending again\n", n)
					return nil
				}
				err := db.RetryDeadEvent(ctx, id)
				if errors.Is(err, domain.ErrNotFound) {
					return fmt.Errorf("--id %d: no such outbox event (finished events are deleted after outbox.retention)", id)
				}
				if errors.Is(err, domain.ErrNotDead) {
					return fmt.Errorf("--id %d: %w", id, err)
				}
				if err != nil {
					return err
				}
				fmt.Fprintln(cmd.OutOrStdout(), "1 dead event(s) made pending again")
				return nil
			})
		},
	}
	retry.Flags().Int64Var(&id, "id", 0, "retry only this outbox id")
	return retry
}

func deadCommand(withStore withStoreFunc) *cobra.Command {
	var limit int
	var asJSON bool
	dead := &cobra.Command{
		Use:   "dead [--limit 50] [--json]",
		Short: "List dead events, the last to die first: id, type, aggregate, attempts, last error, when they died",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if limit <= 0 {
				return errors.New("--limit must be positive")
			}
			return withStore(cmd, func(ctx context.Context, db *store.DB) error {
				events, total, err := db.DeadEvents(ctx, limit)
				if err != nil {
					return err
				}
				if asJSON {
					return writeDeadJSON(cmd.OutOrStdout(), events, total)
				}
				return writeDeadTable(cmd.OutOrStdout(), events, total)
			})
		},
	}
	dead.Flags().IntVar(&limit, "limit", 50, "list at most this many")
	dead.Flags().BoolVar(&asJSON, "json", false, "one JSON object, for scripts: {\"total\": N, \"events\": [...]}")
	return dead
}

// writeDeadJSON prints dead events as the operator console's API shows
// them (admin.DeadEvents).
func writeDeadJSON(w io.Writer, events []domain.DeadEvent, total int64) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(admin.NewDeadEvents(events, total))
}

// maxErrorWidth bounds the last error in the table; --json has it whole.
const maxErrorWidth = 100

func writeDeadTable(w io.Writer, events []domain.DeadEvent, total int64) error {
	if total == 0 {
		_, err := fmt.Fprintln(w, "no dead events")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tTYPE\tAGGREGATE\tATTEMPTS\tFAILURES\tDIED\tLAST ERROR")
	for _, e := range events {
		aggregate := "-"
		if a, ok := e.Aggregate(); ok {
			aggregate = a.String()
		}
		died := "-"
		if !e.DiedAt.IsZero() {
			died = e.DiedAt.UTC().Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%d\t%s\t%s\n", e.ID, e.Type, aggregate, e.Attempt, e.Failures, died,
			oneLine(e.LastError, maxErrorWidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if int64(len(events)) < total {
		_, err := fmt.Fprintf(w, "%d of %d dead events, the last to die first (--limit %s for more)\n",
			len(events), total, strconv.FormatInt(total, 10))
		return err
	}
	_, err := fmt.Fprintf(w, "%d dead event(s)\n", total)
	return err
}

// oneLine is s on one line (runs of white space as one space), cut to at
// most width characters.
func oneLine(s string, width int) string {
	s = strings.Join(strings.Fields(s), " ")
	if r := []rune(s); len(r) > width {
		return string(r[:width-1]) + "…"
	}
	if s == "" {
		return "-"
	}
	return s
}
