package bench

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// The memory stage's readers: users of their own, who follow nobody and are
// followed by nobody, whose feeds only this stage writes.
const (
	memoryBase    = 7_000_000
	memoryReaders = 500 // feeds filled: 400k entries at feed.max_len 800
	memorySample  = 100 // of them, whose MEMORY USAGE is summed
	// memoryChunk readers are filled per call, so that no pipeline (and
	// no client's query buffer in Redis) is large next to what is measured.
	memoryChunk = 10
	// cachedPosts is at least how many cached posts are measured.
	cachedPosts = 100
)

// The limits of issue 12, in bytes per kept entry of a full feed.
const (
	maxBytesPerEntry  = 16 // MEMORY USAGE
	maxGrowthPerEntry = 20 // used_memory growth
)

// memoryAtFullFeeds: what a full feed (feed.max_len entries) costs Redis per
// kept entry, by MEMORY USAGE of its keys and by used_memory's growth while
// memoryReaders feeds fill up, and what that makes for a million readers;
// beside the same entries written as plain sorted sets (member = score =
// id, in Redis' default encoding). And what a cached post costs.
func (r *runner) memoryAtFullFeeds(ctx context.Context) error {
	perFeed := r.opts.MaxLen
	ids, err := r.reserveIDs(ctx, perFeed)
	if err != nil {
		return err
	}
	users := make([]int64, memoryReaders)
	for i := range users {
		users[i] = int64(memoryBase + i)
	}
	sample := make([]int64, memorySample)
	for i := range sample {
		sample[i] = users[i*(memoryReaders/memorySample)]
	}
	posts, err := r.cachedPostIDs(ctx, cachedPosts)
	if err != nil {
		return err
	}
	entries := int64(memoryReaders * perFeed)
	var mu, rawMU, muRatio, grow, rawGrow, growRatio, gb, rawGB, post, postJSON, postRatio []float64
	var keys, encoding string
	var ttl time.Duration
	for run := range r.opts.Runs {
		// Ours: the readers' feeds as a first read leaves them (empty), then full.
		if err := r.seedChunks(ctx, users, nil); err != nil {
			return err
		}
		before, err := r.redisMemory(ctx)
		if err != nil {
			return err
		}
		if err := r.seedChunks(ctx, users, ids); err != nil {
			return err
		}
		after, err := r.redisMemory(ctx)
		if err != nil {
			return err
		}
		g := perEntry(after.grown(before), entries)
		m, err := r.fullFeedBytes(ctx, sample, perFeed)
		if err != nil {
			return err
		}
		keys = r.storageEncodings(ctx, sample[0])

		// The same entries as plain sorted sets, written from nothing.
		sets := r.rawSets("rawmem", memoryReaders)
		if err := sets.drop(ctx); err != nil {
			return err
		}
		if before, err = r.redisMemory(ctx); err != nil {
			return err
		}
		if encoding, err = sets.create(ctx, ids); err != nil {
			return err
		}
		if after, err = r.redisMemory(ctx); err != nil {
			return err
		}
		rg := perEntry(after.grown(before), entries)
		rawKeys := make([]string, memorySample)
		for i := range rawKeys {
			rawKeys[i] = sets.key(i * (memoryReaders / memorySample))
		}
		rawMem, err := r.memoryUsage(ctx, rawKeys)
		if err != nil {
			return err
		}
		rm := perEntry(sum(rawMem), int64(memorySample*perFeed))
		if err := sets.drop(ctx); err != nil {
			return err
		}

		pc, err := r.postCache(ctx, posts)
		if err != nil {
			return err
		}
		ttl = pc.minTTL

		mu, rawMU, muRatio = append(mu, m), append(rawMU, rm), append(muRatio, ratio(m, rm))
		grow, rawGrow, growRatio = append(grow, g), append(rawGrow, rg), append(growRatio, ratio(g, rg))
		gb, rawGB = append(gb, gbPerMillion(g, perFeed)), append(rawGB, gbPerMillion(rg, perFeed))
		post, postJSON, postRatio = append(post, pc.bytes), append(postJSON, pc.json), append(postRatio, ratio(pc.bytes, pc.json))
		fmt.Fprintf(r.progress, "  run %d: MEMORY USAGE %.1f B/entry (sorted sets %.1f), used_memory growth %.1f B/entry (%.1f), "+
			"post cache %.0f B/post\n", run+1, m, rm, g, rg, pc.bytes)
	}
	if err := r.dropFeeds(ctx, users); err != nil {
		return err
	}

	idsNote := fmt.Sprintf("ids from %d, %d apart (not real posts; the posts' id sequence moved past them)", ids[0], fullFeedIDGap)
	raw := fmt.Sprintf("the same entries as plain sorted sets, member = score = id (OBJECT ENCODING %s, Redis' default for %d members)",
		encoding, perFeed)
	r.report.add(Stage{
		Name: "memory: MEMORY USAGE per kept entry, full feeds", Unit: "B/entry",
		Ours: median(mu), Limit: median(rawMU), Ratio: median(muRatio), Spread: spreadOf(mu, rawMU, muRatio),
		Target: fmt.Sprintf("≤ %d B/entry", maxBytesPerEntry),
		Note: fmt.Sprintf("MEMORY USAGE summed over the keys of each of %d feeds of %d entries (%s), / the entries they hold; "+
			"limit: %s; %s", memorySample, perFeed, keys, raw, idsNote),
		Redis: r.redisLabel,
	})
	r.report.add(Stage{
		Name: "memory: used_memory growth per kept entry, full feeds", Unit: "B/entry",
		Ours: median(grow), Limit: median(rawGrow), Ratio: median(growRatio), Spread: spreadOf(grow, rawGrow, growRatio),
		Target: fmt.Sprintf("≤ %d B/entry", maxGrowthPerEntry),
		Note: fmt.Sprintf("INFO memory used_memory (less the clients' buffers, mem_clients_normal) before and after %d readers' "+
			"feeds, empty as a first read leaves them, were filled with %d entries each, / the %d entries kept; "+
			"limit: as many plain sorted sets written from nothing, keys included", memoryReaders, perFeed, entries),
		Redis: r.redisLabel,
	})
	r.report.add(Stage{
		Name: "memory: Redis per 1M readers with full feeds", Unit: "GB",
		Ours: median(gb), Limit: median(rawGB), Ratio: median(growRatio), Spread: spreadOf(gb, rawGB, growRatio),
		Target: fmt.Sprintf("≤ %.0f GB (%d B × %d entries)", gbPerMillion(maxGrowthPerEntry, perFeed), maxGrowthPerEntry, perFeed),
		Note: fmt.Sprintf("used_memory growth per kept entry × %d entries × 10⁶ readers (GB = 10⁹ bytes); "+
			"the readers' following hashes and the post cache not included", perFeed),
		Redis: r.redisLabel,
	})
	bound := "no TTL on some of them: unbounded"
	if ttl > 0 {
		bound = fmt.Sprintf("every one has a TTL, %.1f h left on the one nearest its end", ttl.Hours())
	}
	r.report.add(Stage{
		Name: "memory: post cache per post", Unit: "B/post",
		Ours: median(post), Limit: median(postJSON), Ratio: median(postRatio), Spread: spreadOf(post, postJSON, postRatio),
		Target: "bounded (a TTL or a size)",
		Note: fmt.Sprintf("MEMORY USAGE of %d cached posts read through GET /v1/feed (key post:<id>); limit: their JSON's own bytes "+
			"(STRLEN); %s; the bench's posts are short (%.0f B of JSON): a real post's bytes grow with its body",
			len(posts), bound, median(postJSON)),
		Redis: r.redisLabel,
	})
	return nil
}

// seedChunks gives users complete feeds holding ids (empty ones for none),
// memoryChunk readers a call. They follow nobody.
func (r *runner) seedChunks(ctx context.Context, users []int64, ids []int64) error {
	seeder := r.seeder()
	for start := 0; start < len(users); start += memoryChunk {
		readers := map[int64][]int64{}
		for _, u := range users[start:min(start+memoryChunk, len(users))] {
			readers[u] = nil
		}
		var err error
		if ids == nil {
			err = seeder.SeedEmpty(ctx, readers)
		} else {
			err = seeder.SeedFull(ctx, readers, ids)
		}
		if err != nil {
			return fmt.Errorf("readers' feeds: %w", err)
		}
	}
	return nil
}

// fullFeedBytes is MEMORY USAGE per entry of users' feeds, each full with
// perFeed entries (SeedFull keeps the newest feed.max_len): summed over the
// keys of every feed, divided by the entries they hold. Where the entries
// can be counted from outside it checks that every feed holds perFeed.
func (r *runner) fullFeedBytes(ctx context.Context, users []int64, perFeed int) (float64, error) {
	mem, err := r.feedBytes(ctx, users)
	if err != nil {
		return 0, err
	}
	counts, countable, err := r.feedEntries(ctx, users)
	if err != nil {
		return 0, err
	}
	for i, u := range users {
		if mem[i] == 0 {
			return 0, fmt.Errorf("the full feed of %d is not in Redis", u)
		}
		if countable && counts[i] != int64(perFeed) {
			return 0, fmt.Errorf("the full feed of %d holds %d entries, not feed.max_len %d", u, counts[i], perFeed)
		}
	}
	return perEntry(sum(mem), int64(len(users)*perFeed)), nil
}

// dropFeeds deletes users' feeds and following hashes.
func (r *runner) dropFeeds(ctx context.Context, users []int64) error {
	seeder := r.seeder()
	for _, u := range users {
		if err := seeder.Drop(ctx, u); err != nil {
			return err
		}
	}
	return nil
}

// cachedPostIDs reads the read stage's first reader's feed through the API,
// page after page, until at least n posts were read (each read caches the
// posts it shows), and returns their ids.
func (r *runner) cachedPostIDs(ctx context.Context, n int) ([]int64, error) {
	seen := map[int64]bool{}
	for cursor := ""; len(seen) < n; {
		ids, next, err := r.readFeedPage(ctx, readerBase, cursor)
		if err != nil {
			return nil, fmt.Errorf("posts to cache: %w", err)
		}
		for _, id := range ids {
			seen[id] = true
		}
		if next == "" {
			break
		}
		cursor = next
	}
	if len(seen) == 0 {
		return nil, fmt.Errorf("posts to cache: reader %d's feed is empty", readerBase)
	}
	return slices.Sorted(maps.Keys(seen)), nil
}

// postCacheCost is what the cached posts cost, on average.
type postCacheCost struct {
	bytes, json float64 // MEMORY USAGE and STRLEN per post
	// minTTL is the shortest TTL left among them; negative when one has
	// none.
	minTTL time.Duration
}

// postCache measures the post cache's keys of posts (the key format of
// feed/keys.go: prefix + "post:" + id). A post not cached fails it.
func (r *runner) postCache(ctx context.Context, posts []int64) (postCacheCost, error) {
	keys := make([]string, len(posts))
	for i, id := range posts {
		keys[i] = r.h.Prefix + "post:" + strconv.FormatInt(id, 10)
	}
	mem, err := r.memoryUsage(ctx, keys)
	if err != nil {
		return postCacheCost{}, err
	}
	lens := make([]*redis.IntCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	if _, err := r.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, k := range keys {
			lens[i], ttls[i] = p.StrLen(ctx, k), p.PTTL(ctx, k)
		}
		return nil
	}); err != nil {
		return postCacheCost{}, fmt.Errorf("post cache: %w", err)
	}
	var c postCacheCost
	var jsonBytes int64
	for i, k := range keys {
		if mem[i] == 0 {
			return postCacheCost{}, fmt.Errorf("post cache: %s is not cached after a read", k)
		}
		jsonBytes += lens[i].Val()
		t := ttls[i].Val()
		switch {
		case t <= 0:
			c.minTTL = -1
		case c.minTTL == 0 || (c.minTTL > 0 && t < c.minTTL):
			c.minTTL = t
		}
	}
	c.bytes = perEntry(sum(mem), int64(len(keys)))
	c.json = perEntry(jsonBytes, int64(len(keys)))
	return c, nil
}
