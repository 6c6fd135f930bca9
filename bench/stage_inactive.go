package bench

import (
	"context"
	"fmt"
)

// inactiveFollowers: one post to an author's 20,000 followers, half of whom
// have been away past feed.active_days (their feeds expired): the work and
// Redis memory that skipping them saves.
func (r *runner) inactiveFollowers(ctx context.Context) error {
	if r.ownWorkers { // the in-process workers were stopped: bring one
		p, err := r.startWorker(ctx)
		if err != nil {
			return err
		}
		defer p.Stop()
	}
	if _, err := r.timeOnePost(ctx, authorAway); err != nil {
		return err
	}
	users := make([]int64, awayFollowers)
	for i := range users {
		users[i] = int64(awayBase + i)
	}
	written, feeds, bytes := 0, 0, int64(0)
	countable := true
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		mem, err := r.feedBytes(ctx, batch)
		if err != nil {
			return err
		}
		counts, ok, err := r.feedEntries(ctx, batch)
		if err != nil {
			return err
		}
		countable = countable && ok
		for i := range batch {
			if mem[i] > 0 { // the feed exists
				feeds++
				bytes += mem[i]
				if ok {
					written += int(counts[i])
				}
			}
		}
	}
	counted := "entries written"
	if !countable {
		// Only the feed package can count entries in this encoding; each
		// feed that exists is an active follower's, who got the one post.
		written, counted = feeds, "feeds written (entries not countable from outside in this encoding)"
	}
	perFeed := float64(bytes) / float64(max(feeds, 1))
	saved := float64(awayFollowers-feeds) * perFeed
	// A feed that has filled up (a reader of the read stage) costs more.
	fullBytes, err := r.feedBytes(ctx, []int64{readerBase})
	if err != nil {
		return err
	}
	full := float64(fullBytes[0])
	r.report.add(Stage{
		Name: "inactive followers skipped", Unit: "entries", Ours: float64(written), Limit: float64(awayFollowers),
		Ratio: ratio(float64(written), float64(awayFollowers)), Target: "work ∝ active followers",
		Note: fmt.Sprintf("one post to %s followers, half away: %d %s, %d feeds in Redis (%.0f B each here), "+
			"%.1f MB not kept for the %d away — %.1f MB at %.0f KB for a feed filled to feed.max_len",
			humanInt(awayFollowers), written, counted, feeds, perFeed, saved/1e6, awayFollowers-feeds,
			float64(awayFollowers-feeds)*full/1e6, full/1e3),
	})
	fmt.Fprintf(r.progress, "  %d of %d followers written; %.1f MB of feeds not kept\n", written, awayFollowers, saved/1e6)
	return nil
}
