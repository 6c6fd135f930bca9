package fanout

import (
	"context"
	"fmt"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/failpoint"
)

// applyFollowState applies the follow state as it is now, not as the event says
// (follow.created and follow.deleted alike), so that events handled late,
// twice or out of order (an unfollow before its follow) cannot leave an
// unfollowed author in a feed: it reads the state first and applies it, so a
// follow.created handled after the unfollow merges nothing, not even for a
// moment, and a follow.deleted handled after a new follow removes nothing. A
// change committed while the state is applied is seen by the check after the
// write, and applied in turn; a change committed later runs its own clean-up
// (in the API and in its event) after this write, so nothing slips between.
func (w *Worker) applyFollowState(ctx context.Context, p domain.FollowPayload) error {
	following, err := w.graph.IsFollowing(ctx, p.FollowerID, p.FolloweeID)
	if err != nil {
		return err
	}
	failpoint.Hit(ctx, failpoint.BeforeApply)
	for range maxFollowRounds {
		if following {
			added, err := w.feeds.Followed(ctx, p.FollowerID, p.FolloweeID)
			w.metrics.entries.Add(float64(added))
			if err != nil {
				return err
			}
			w.cfg.Live.Followed(ctx, p.FollowerID, p.FolloweeID)
		} else {
			if err := w.feeds.Unfollowed(ctx, p.FollowerID, p.FolloweeID); err != nil {
				return err
			}
			w.cfg.Live.Unfollowed(ctx, p.FollowerID, p.FolloweeID)
		}
		now, err := w.graph.IsFollowing(ctx, p.FollowerID, p.FolloweeID)
		if err != nil || now == following {
			return err
		}
		following = now
	}
	return fmt.Errorf("follow of %d by %d keeps changing", p.FolloweeID, p.FollowerID)
}

// maxFollowRounds bounds how often applyFollowState applies a state that keeps
// changing under it; the event then fails and is retried after a backoff.
const maxFollowRounds = 4
