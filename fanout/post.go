package fanout

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/failpoint"
)

// pushPost delivers a new post: into its author's timeline if the author
// is a celebrity, else into the followers' feeds (and the timeline too for a
// former celebrity). What the post's delete must clean is recorded first: a
// pulled post is in no feed, unless another handling of its event (one
// before, or a redelivery after the author fell below the threshold) pushed
// it. Only a first handling can know that none did before it, and a later
// one that pushes (or any push of a former celebrity's post, whose earlier
// handling may have been a pull) marks the post pushed for good.
func (w *Worker) pushPost(ctx context.Context, t domain.Delivery, p domain.PostPayload) (outcome, error) {
	facts, ok, err := w.deliverable(ctx, p.PostID, p.AuthorID)
	if !ok {
		return outcomeDone, err
	}
	out, err := w.pushToReaders(ctx, t, p, facts)
	if err != nil {
		return out, err
	}
	// The author's own feed last: a failure there (its Redis node failing
	// over) must not hold up the followers' feeds; the retry it causes
	// repeats their pushes, which find the post there and add nothing.
	return out, w.pushOwn(ctx, domain.Entry(p))
}

// pushToReaders delivers a new post to its readers: the timeline of a
// celebrity, else the followers' feeds, in chunks when they are many.
func (w *Worker) pushToReaders(ctx context.Context, t domain.Delivery, p domain.PostPayload, facts domain.PostFacts) (outcome, error) {
	followers, pulled := facts.Followers, facts.Pulled
	first := firstDelivery(t)
	if w.feeds.IsCelebrity(followers) { // pulled at read time: one write, not millions
		if !pulled {
			if err := w.graph.MarkPulled(ctx, p.AuthorID); err != nil {
				return outcomeDone, err
			}
		}
		if first {
			if err := w.graph.MarkPostPulled(ctx, p.PostID, t.ID); err != nil {
				return outcomeDone, err
			}
		}
		if err := w.feeds.AddToTimeline(ctx, domain.Entry(p)); err != nil {
			return outcomeDone, err
		}
		w.cfg.Live.Pulled(ctx, p.PostID, p.AuthorID)
		return outcomeDone, nil
	}
	if pulled || !first {
		if err := w.graph.MarkPostPushed(ctx, p.PostID); err != nil {
			return outcomeDone, err
		}
	}
	if pulled {
		// A former celebrity: readers still merge the timeline (it holds
		// the posts that went nowhere else), so it must stay complete.
		if err := w.feeds.AddToTimeline(ctx, domain.Entry(p)); err != nil {
			return outcomeDone, err
		}
	}
	if followers > int64(w.cfg.ChunkSize) {
		return w.split(ctx, t.ID, p)
	}
	return outcomeDone, w.push(ctx, domain.Entry(p), 0, 0, first, facts.WritePosition)
}

// pushOwn puts the entry into its author's own feed, which holds their
// posts and reposts (docs/API.md). The request that created it pushed it
// there already, so this push looks before it adds (first is false); asOf
// 0 makes the feed's following hash decide, and it holds its reader.
func (w *Worker) pushOwn(ctx context.Context, e domain.Entry) error {
	res, err := w.feeds.Push(ctx, e, []int64{e.AuthorID}, 0, false)
	w.metrics.entries.Add(float64(res.Added))
	if len(res.Holders) > 0 {
		// Also when the API's push added it first: the author's streams
		// learn of it here (a stream skips what it sent already).
		w.cfg.Live.Pushed(ctx, e.PostID, e.AuthorID, res.Holders)
	}
	if len(res.Missing) > 0 {
		// No feed in Redis (one who follows many keeps none): their
		// streams read it again, from PostgreSQL.
		w.cfg.Live.Unsure(ctx, res.Missing)
	}
	return err
}

// firstDelivery reports whether t is its event's first delivery, claim and
// attempt: nothing of its work can have been done before.
func firstDelivery(t domain.Delivery) bool {
	return t.Deliveries <= 1 && t.Attempt <= 1 && t.Failures == 0
}

// split turns a big fan-out into chunks of ChunkSize followers, each an
// outbox event that any worker can take and that is retried on its own;
// its outcome is outcomeSplit: the event finishes with its last chunk.
func (w *Worker) split(ctx context.Context, eventID int64, p domain.PostPayload) (outcome, error) {
	bounds, err := w.graph.ChunkBoundaries(ctx, p.AuthorID, w.cfg.ChunkSize)
	if err != nil {
		return outcomeDone, err
	}
	chunks := make([]domain.ChunkPayload, 0, len(bounds)+1)
	after := int64(0)
	for _, b := range bounds {
		chunks = append(chunks, domain.ChunkPayload{PostID: p.PostID, AuthorID: p.AuthorID, After: after, Until: b})
		after = b
	}
	chunks = append(chunks, domain.ChunkPayload{PostID: p.PostID, AuthorID: p.AuthorID, After: after})
	if _, err := w.outbox.SplitFanout(ctx, eventID, chunks); err != nil {
		return outcomeDone, err
	}
	return outcomeSplit, nil
}

func (w *Worker) pushChunk(ctx context.Context, t domain.Delivery, c domain.ChunkPayload) error {
	facts, ok, err := w.deliverable(ctx, c.PostID, c.AuthorID)
	if !ok {
		return err
	}
	return w.push(ctx, domain.Entry{PostID: c.PostID, AuthorID: c.AuthorID}, c.After, c.Until, firstDelivery(t), facts.WritePosition)
}

// push writes entry e into the feeds of its author's followers in (after,
// until] (until 0: no bound). first and asOf: see Feeds.Push; asOf is the
// write position read before the pages (domain.PostFacts): a feed whose
// reader unfollowed someone, or was rebuilt, after it is checked against
// whom they follow now. The live streams are
// told of the readers whose feed holds the entry, not of the whole page: a
// reader whose feed refused it (an unfollow since the page was read) would
// be shown a post the feed does not have. A reader whose feed is not in
// Redis is told to read it again (which rebuilds it from PostgreSQL).
func (w *Worker) push(ctx context.Context, e domain.Entry, after, until int64, first bool, asOf int64) error {
	return w.eachFollowerPage(ctx, e.AuthorID, after, until, func(ctx context.Context, followers []int64) error {
		failpoint.Hit(ctx, failpoint.BeforePush)
		res, err := w.feeds.Push(ctx, e, followers, asOf, first)
		w.metrics.entries.Add(float64(res.Added))
		if len(res.Holders) > 0 {
			w.cfg.Live.Pushed(ctx, e.PostID, e.AuthorID, res.Holders)
		}
		if len(res.Missing) > 0 {
			w.cfg.Live.Unsure(ctx, res.Missing)
		}
		if span := trace.SpanFromContext(ctx); span.IsRecording() {
			span.SetAttributes(attribute.Int("newsfeed.page.entries", res.Added))
		}
		return err
	})
}

func (w *Worker) removePost(ctx context.Context, p domain.PostPayload) error {
	if err := w.feeds.ForgetPost(ctx, p.PostID); err != nil {
		return err
	}
	// The author's own feed holds it, whoever else does.
	if err := w.feeds.Remove(ctx, []int64{p.AuthorID}, []int64{p.PostID}); err != nil {
		return err
	}
	w.cfg.Live.Removed(ctx, p.PostID, []int64{p.AuthorID})
	if err := w.feeds.RemoveFromTimeline(ctx, domain.Entry(p)); err != nil {
		return err
	}
	// A celebrity's post went to the timeline only: no follower's feed
	// has it, and a ZREM to each of millions of feeds would find nothing.
	if only, err := w.graph.PostPulledOnly(ctx, p.PostID); err != nil || only {
		if only {
			w.cfg.Live.Unpulled(ctx, p.PostID, p.AuthorID)
		}
		return err
	}
	return w.eachFollowerPage(ctx, p.AuthorID, 0, 0, func(ctx context.Context, followers []int64) error {
		if err := w.feeds.Remove(ctx, followers, []int64{p.PostID}); err != nil {
			return err
		}
		w.cfg.Live.Removed(ctx, p.PostID, followers)
		return nil
	})
}

// eachFollowerPage calls fn with the author's followers, one keyset page at
// a time, each in its span (fn's ctx): memory stays flat however many
// followers there are. The next page
// is read from PostgreSQL while fn writes the current one to Redis. A page
// that a dependency was not ready for (domain.ErrUnavailable: one shard's
// replica behind) does not stop the pages after it, whose followers may be
// elsewhere: the error is returned at the end, and the retry redoes it all.
func (w *Worker) eachFollowerPage(ctx context.Context, authorID, after, until int64, fn func(context.Context, []int64) error) error {
	type page struct {
		ids []int64
		err error
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pages := make(chan page, 1)
	go func() {
		defer close(pages)
		if until <= 0 {
			until = math.MaxInt64
		}
		for {
			// One follower past the page says whether another follows: a
			// fan-out whose followers fill its last page exactly reads no
			// empty page after it.
			ids, err := w.graph.FollowerIDRange(ctx, authorID, after, until, w.cfg.PageSize+1)
			more := len(ids) > w.cfg.PageSize
			if more {
				ids = ids[:w.cfg.PageSize]
			}
			select {
			case pages <- page{ids, err}:
			case <-ctx.Done():
				return
			}
			if err != nil || !more {
				return
			}
			after = ids[len(ids)-1]
		}
	}()
	var unavailable error
	for p := range pages {
		if p.err != nil {
			return p.err
		}
		if len(p.ids) == 0 {
			break
		}
		if err := w.page(ctx, p.ids, fn); errors.Is(err, domain.ErrUnavailable) {
			unavailable = cmp.Or(unavailable, err)
		} else if err != nil {
			return err
		}
	}
	return unavailable
}

// deliverable reads the post's facts and checks that it is there to
// deliver: missing is an error worth retrying (a replica may lag, an
// operator may restore it), by somebody else is a malformed event, deleted
// is nothing to do.
func (w *Worker) deliverable(ctx context.Context, postID, authorID int64) (domain.PostFacts, bool, error) {
	facts, err := w.graph.PostFacts(ctx, postID)
	switch {
	case err != nil:
		return facts, false, err
	case !facts.Found:
		return facts, false, fmt.Errorf("post %d does not exist", postID)
	case facts.AuthorID != authorID:
		return facts, false, permanent("post %d is by user %d, not %d", postID, facts.AuthorID, authorID)
	}
	return facts, !facts.Deleted, nil // a deleted post: post.deleted cleans what was
}
