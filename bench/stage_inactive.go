package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/redis/go-redis/v9"
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
	for start := 0; start < len(users); start += 1000 {
		batch := users[start:min(start+1000, len(users))]
		cards := make([]*redis.IntCmd, len(batch))
		mem := make([]*redis.IntCmd, len(batch))
		if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, u := range batch {
				cards[i] = p.ZCount(ctx, r.feedKey(u), "1", "+inf") // post ids, not markers
				mem[i] = p.MemoryUsage(ctx, r.feedKey(u))
			}
			return nil
		}); err != nil && !errors.Is(err, redis.Nil) {
			return err
		}
		for i := range batch {
			if m := mem[i].Val(); m > 0 { // the feed exists
				feeds++
				written += int(cards[i].Val())
				bytes += m
			}
		}
	}
	perFeed := float64(bytes) / float64(max(feeds, 1))
	saved := float64(awayFollowers-feeds) * perFeed
	// A feed that has filled up (a reader of the read stage) costs more.
	full := float64(r.rdb.MemoryUsage(ctx, r.feedKey(readerBase)).Val())
	r.report.add(Stage{
		Name: "inactive followers skipped", Unit: "entries", Ours: float64(written), Limit: float64(awayFollowers),
		Ratio: float64(written) / float64(awayFollowers), Target: "work ∝ active followers",
		Note: fmt.Sprintf("one post to %s followers, half away: %d entries written, %d feeds in Redis (%.0f B each here), "+
			"%.1f MB not kept for the %d away — %.1f MB at %.0f KB for a feed filled to feed.max_len",
			humanInt(awayFollowers), written, feeds, perFeed, saved/1e6, awayFollowers-feeds,
			float64(awayFollowers-feeds)*full/1e6, full/1e3),
	})
	fmt.Fprintf(r.progress, "  %d of %d followers written; %.1f MB of feeds not kept\n", written, awayFollowers, saved/1e6)
	return nil
}
