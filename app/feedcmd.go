package app

import (
	"context"
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/newsfeed/newsfeed/feed"
)

func feedCommand(load loadFunc) *cobra.Command {
	cmd := &cobra.Command{Use: "feed", Short: "Repair one user's home feed in Redis"}
	// withSystem opens PostgreSQL and Redis as a role does (Redis must
	// answer within database.connect_wait) and runs fn.
	withSystem := func(cmd *cobra.Command, user int64, fn func(ctx context.Context, s *System) error) error {
		if user <= 0 {
			return errors.New("--user must be a positive user id")
		}
		cfg, err := load(cmd, nil)
		if err != nil {
			return err
		}
		log, err := NewLogger(cfg)
		if err != nil {
			return err
		}
		defer func() { _ = log.Sync() }()
		s, err := Open(cmd.Context(), cfg, log)
		if err != nil {
			return err
		}
		defer s.Close()
		return fn(cmd.Context(), s)
	}

	var rebuildUser int64
	rebuild := &cobra.Command{
		Use:   "rebuild --user N",
		Short: "Drop a user's feed and rebuild it from PostgreSQL now, as their next read would",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSystem(cmd, rebuildUser, func(ctx context.Context, s *System) error {
				stored, err := s.Feeds.Rebuild(ctx, rebuildUser)
				if err != nil {
					return err
				}
				if stored.FollowsMany {
					fmt.Fprintf(cmd.OutOrStdout(), "user %d follows more than fanout.following_threshold (%d) accounts: "+
						"Redis keeps no feed for them, their reads come from PostgreSQL\n", rebuildUser, s.Config.Fanout.FollowingThreshold)
					return nil
				}
				holds := "every post there is"
				if !stored.Whole {
					holds = fmt.Sprintf("the newest %d (feed.max_len); reads go on in PostgreSQL", s.Config.Feed.MaxLen)
				}
				fmt.Fprintf(cmd.OutOrStdout(), "user %d's feed rebuilt from PostgreSQL: %s in Redis, %s\n",
					rebuildUser, posts(len(stored.IDs)), holds)
				return nil
			})
		},
	}
	rebuild.Flags().Int64Var(&rebuildUser, "user", 0, "the user whose feed to rebuild")
	_ = rebuild.MarkFlagRequired("user")

	var dropUser int64
	drop := &cobra.Command{
		Use:   "drop --user N",
		Short: "Drop a user's feed from Redis; their next read rebuilds it from PostgreSQL",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return withSystem(cmd, dropUser, func(ctx context.Context, s *System) error {
				stored, err := feed.Inspect(ctx, s.Redis, s.Config.Redis.Prefix, dropUser)
				if err != nil {
					return err
				}
				if err := s.Feeds.Drop(ctx, dropUser); err != nil {
					return err
				}
				had := "it was not in Redis"
				if stored.Exists {
					had = "it held " + posts(len(stored.IDs))
				}
				fmt.Fprintf(cmd.OutOrStdout(), "user %d's feed dropped from Redis (%s); their next read rebuilds it from PostgreSQL\n",
					dropUser, had)
				return nil
			})
		},
	}
	drop.Flags().Int64Var(&dropUser, "user", 0, "the user whose feed to drop")
	_ = drop.MarkFlagRequired("user")

	cmd.AddCommand(rebuild, drop)
	return cmd
}

// posts is "1 post", "2 posts".
func posts(n int) string {
	if n == 1 {
		return "1 post"
	}
	return fmt.Sprintf("%d posts", n)
}
