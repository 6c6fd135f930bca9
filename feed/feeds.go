package feed

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"
)

// Store is the PostgreSQL side that feeds cache.
type Store interface {
	// PostsByID returns the live posts among ids, in any order.
	PostsByID(ctx context.Context, ids []int64) ([]Post, error)
	// FolloweePosts returns up to limit live posts with id < before by the
	// people followerID follows, newest first.
	FolloweePosts(ctx context.Context, followerID, before int64, limit int) ([]Post, error)
	// AuthorPostIDsSince returns the author's live post ids >= since, newest
	// first, at most limit.
	AuthorPostIDsSince(ctx context.Context, authorID, since int64, limit int) ([]int64, error)
	// CelebrityFollowees returns whom followerID follows among the authors
	// with more than threshold followers.
	CelebrityFollowees(ctx context.Context, followerID, threshold int64) ([]int64, error)
}

// Config configures Feeds. Zero fields take the defaults named.
type Config struct {
	// Prefix is put before every Redis key. Defaults to "".
	Prefix string
	// MaxLen is entries kept per feed. Defaults to 800.
	MaxLen int
	// Backfill is how many recent posts of a newly followed author are
	// merged into the follower's feed. Defaults to 0: none.
	Backfill int
	// RebuildWait bounds how long a read waits for another reader's rebuild
	// before it answers from PostgreSQL. Defaults to 5s.
	RebuildWait time.Duration
	// PostTTL is how long a post stays in the post cache. Defaults to 24h.
	PostTTL time.Duration
	// ActiveTTL is how long a feed stays in Redis without being read
	// (feed.active_days). Fan-out writes only feeds that exist, so readers
	// who stay away cost neither memory nor fan-out work, and get their feed
	// rebuilt when they return. Defaults to 30 days.
	ActiveTTL time.Duration
	// CelebrityThreshold: authors with more followers are pulled into feeds
	// at read time instead of fanned out (fanout.celebrity_threshold).
	// Defaults to 0: nobody is.
	CelebrityThreshold int64
	// Cluster tells that Redis is a Redis Cluster, where one script call
	// cannot touch the feeds of many users. Defaults to false.
	Cluster bool
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
}

// Feeds reads and writes home feeds.
type Feeds struct {
	rdb   redis.UniversalClient
	store Store
	cfg   Config
	keys  keys
	log   *zap.Logger
}

// New builds Feeds on a Redis client and the PostgreSQL store.
func New(rdb redis.UniversalClient, store Store, cfg Config) *Feeds {
	if cfg.MaxLen <= 0 {
		cfg.MaxLen = 800
	}
	if cfg.RebuildWait <= 0 {
		cfg.RebuildWait = 5 * time.Second
	}
	if cfg.PostTTL <= 0 {
		cfg.PostTTL = 24 * time.Hour
	}
	if cfg.ActiveTTL <= 0 {
		cfg.ActiveTTL = 30 * 24 * time.Hour
	}
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	return &Feeds{rdb: rdb, store: store, cfg: cfg, keys: keys{cfg.Prefix}, log: cfg.Logger}
}

// maxPipeline bounds the commands sent in one pipeline; very large pipelines
// fail or stall Redis (Misskey saw it at ~30k).
const maxPipeline = 2000

// maxScriptKeys bounds the feeds one pushManyScript call writes, so that no
// call holds Redis for long (about a millisecond per thousand).
const maxScriptKeys = 1000

// Push adds post postID to the feeds of followers that exist and trims them.
// It returns how many feeds gained the entry (a repeated push gains none).
func (f *Feeds) Push(ctx context.Context, postID int64, followers []int64) (int, error) {
	if !f.cfg.Cluster {
		return f.pushMany(ctx, postID, followers)
	}
	added := 0
	for start := 0; start < len(followers); start += maxPipeline {
		batch := followers[start:min(start+maxPipeline, len(followers))]
		cmds, err := f.runScripts(ctx, pushScript, len(batch), func(p redis.Pipeliner, i int) *redis.Cmd {
			return pushScript.EvalSha(ctx, p, []string{f.keys.feed(batch[i])}, postID, f.cfg.MaxLen)
		})
		if err != nil {
			return added, fmt.Errorf("push post %d to feeds: %w", postID, err)
		}
		for _, c := range cmds {
			if n, _ := c.Int(); n == 1 {
				added++
			}
		}
	}
	return added, nil
}

// Merge adds posts to the feed of userID, if the feed exists, and trims it.
// When floor > 0 the merged posts are not known to be complete below floor,
// so the feed's entries older than floor are dropped (reads go on in
// PostgreSQL there). Posts older than what a feed holds are left out, and a
// feed under rebuild is dropped (see mergeScript). It returns how many were
// new.
func (f *Feeds) Merge(ctx context.Context, userID int64, postIDs []int64, floor int64) (int, error) {
	if len(postIDs) == 0 {
		return 0, nil
	}
	args := make([]any, 0, len(postIDs)+2)
	args = append(args, f.cfg.MaxLen, floor)
	for _, id := range postIDs {
		args = append(args, id)
	}
	n, err := mergeScript.Run(ctx, f.rdb, []string{f.keys.feed(userID)}, args...).Int()
	if err != nil {
		return 0, fmt.Errorf("merge posts into feed %d: %w", userID, err)
	}
	return max(n, 0), nil
}

// trimSlack is how many entries over max_len a feed may hold before a push
// trims it back: a sixteenth of max_len, so a trim removes many entries at
// once instead of one at every push.
func trimSlack(maxLen int) int { return max(maxLen/16, 0) }

// pushMany is Push in one script call per maxScriptKeys followers, all in
// one pipeline.
func (f *Feeds) pushMany(ctx context.Context, postID int64, followers []int64) (int, error) {
	calls := (len(followers) + maxScriptKeys - 1) / maxScriptKeys
	cmds, err := f.runScripts(ctx, pushManyScript, calls, func(p redis.Pipeliner, i int) *redis.Cmd {
		batch := followers[i*maxScriptKeys : min((i+1)*maxScriptKeys, len(followers))]
		keys := make([]string, len(batch))
		for j, u := range batch {
			keys[j] = f.keys.feed(u)
		}
		return pushManyScript.EvalSha(ctx, p, keys, postID, f.cfg.MaxLen, trimSlack(f.cfg.MaxLen))
	})
	if err != nil {
		return 0, fmt.Errorf("push post %d to feeds: %w", postID, err)
	}
	added := 0
	for _, c := range cmds {
		n, _ := c.Int()
		added += n
	}
	return added, nil
}

// Followed merges up to Backfill recent posts of followee into the feed of
// follower (if it exists), and returns how many were new.
func (f *Feeds) Followed(ctx context.Context, follower, followee int64) (int, error) {
	if err := f.forgetCelebrities(ctx, follower); err != nil {
		return 0, err
	}
	if f.cfg.Backfill <= 0 {
		return 0, nil
	}
	ids, err := f.store.AuthorPostIDsSince(ctx, followee, 0, f.cfg.Backfill)
	if err != nil {
		return 0, fmt.Errorf("backfill feed %d: %w", follower, err)
	}
	floor := int64(0)
	if len(ids) == f.cfg.Backfill { // the followee may have older posts
		floor = ids[len(ids)-1]
	}
	return f.Merge(ctx, follower, ids, floor)
}

// Unfollowed removes followee's posts from the feed of follower without
// scanning the feed: a feed of MaxLen entries can only hold the followee's
// MaxLen newest posts, so those are the ones removed.
func (f *Feeds) Unfollowed(ctx context.Context, follower, followee int64) error {
	if err := f.forgetCelebrities(ctx, follower); err != nil {
		return err
	}
	ids, err := f.store.AuthorPostIDsSince(ctx, followee, 0, f.cfg.MaxLen)
	if err != nil {
		return fmt.Errorf("unfill feed %d: %w", follower, err)
	}
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = id
	}
	if err := unfollowScript.Run(ctx, f.rdb, []string{f.keys.feed(follower)}, args...).Err(); err != nil {
		return fmt.Errorf("unfill feed %d: %w", follower, err)
	}
	return nil
}

// Remove takes posts out of the feeds of users, in one round trip per batch.
func (f *Feeds) Remove(ctx context.Context, users []int64, postIDs []int64) error {
	if len(postIDs) == 0 {
		return nil
	}
	members := make([]any, len(postIDs))
	for i, id := range postIDs {
		members[i] = strconv.FormatInt(id, 10)
	}
	for start := 0; start < len(users); start += maxPipeline {
		batch := users[start:min(start+maxPipeline, len(users))]
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, u := range batch {
				p.ZRem(ctx, f.keys.feed(u), members...)
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("remove posts from feeds: %w", err)
		}
	}
	return nil
}

// ForgetPost marks a deleted post in the post cache, so that no read shows it
// even while feeds still list it.
func (f *Feeds) ForgetPost(ctx context.Context, postID int64) error {
	if err := f.rdb.Set(ctx, f.keys.post(postID), tombstone, f.cfg.PostTTL).Err(); err != nil {
		return fmt.Errorf("forget post %d: %w", postID, err)
	}
	return nil
}

// Drop deletes a user's feed and cached celebrity list; the next read
// rebuilds them from PostgreSQL.
func (f *Feeds) Drop(ctx context.Context, userID int64) error {
	if err := f.rdb.Del(ctx, f.keys.feed(userID), f.keys.celebrities(userID)).Err(); err != nil {
		return fmt.Errorf("drop feed %d: %w", userID, err)
	}
	return nil
}

// runScripts sends n script calls in one pipeline. Redis forgets scripts when
// it restarts; on NOSCRIPT the script is loaded again and the pipeline resent
// (every call in it is idempotent).
func (f *Feeds) runScripts(ctx context.Context, s *redis.Script, n int, call func(redis.Pipeliner, int) *redis.Cmd) ([]*redis.Cmd, error) {
	for attempt := 0; ; attempt++ {
		cmds := make([]*redis.Cmd, n)
		_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range n {
				cmds[i] = call(p, i)
			}
			return nil
		})
		if err != nil && redis.HasErrorPrefix(err, "NOSCRIPT") && attempt == 0 {
			if err := s.Load(ctx, f.rdb).Err(); err != nil {
				return nil, fmt.Errorf("load script: %w", err)
			}
			continue
		}
		return cmds, err
	}
}

// Page is one page of a home feed.
type Page struct {
	// Posts, newest first.
	Posts []Post
	// Next is the id to read below for the next page, 0 on the last page.
	Next int64
}

// Read returns up to limit posts of userID's home feed with id < before
// (before <= 0 reads from the newest), newest first, with no duplicates and
// no deleted posts: the user's feed merged with the timelines of the
// celebrities they follow, and past what Redis keeps, PostgreSQL.
func (f *Feeds) Read(ctx context.Context, userID, before int64, limit int) (Page, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	want := limit + 1 // one more tells whether there is a next page
	posts := make([]Post, 0, want)
	cursor := before
	var celebs []int64
	for first := true; len(posts) < want; first = false {
		n := want - len(posts)
		ids, floor, found, err := f.readRedis(ctx, userID, celebs, first, cursor, n)
		if err != nil {
			return Page{}, err
		}
		celebs = found
		hydrated, err := f.hydrate(ctx, ids)
		if err != nil {
			return Page{}, err
		}
		posts = append(posts, hydrated...)
		if floor == 0 {
			if len(ids) < n {
				break // every source holds its whole history: there is no more
			}
			cursor = ids[len(ids)-1] // some were deleted: read on in Redis
			continue
		}
		// Redis holds nothing sure below floor: go on from the truth.
		more, err := f.store.FolloweePosts(ctx, userID, floor, want-len(posts))
		if err != nil {
			return Page{}, fmt.Errorf("read feed %d: %w", userID, err)
		}
		posts = append(posts, more...)
		break
	}
	page := Page{Posts: posts}
	if len(posts) > limit {
		page.Posts = posts[:limit]
		page.Next = posts[limit-1].ID
	}
	return page, nil
}

// sortedSet is what one Redis source of a home feed gave for a page.
type sortedSet struct {
	ids      []int64
	complete bool
	// whole: the set holds its whole history, so running out of it does
	// not mean PostgreSQL has more.
	whole bool
}

// readRedis reads up to n post ids below before from the user's feed and
// the timelines of the celebrities they follow (asked for on the first call
// of a read, then passed in), merged newest first without duplicates. A
// source that ran out is whole in Redis only down to its last id: floor is
// then the highest such id (or before, when one gave nothing), and only ids
// >= floor are returned; PostgreSQL goes on below it. floor is 0 when Redis
// had n sure ids, or when every source that ran out holds its whole history
// (then fewer than n ids are all there is). Missing sources are rebuilt first.
func (f *Feeds) readRedis(ctx context.Context, userID int64, celebs []int64, first bool, before int64, n int) (ids []int64, floor int64, found []int64, err error) {
	keys := []string{f.keys.feed(userID)}
	for _, c := range celebs {
		keys = append(keys, f.keys.timeline(c))
	}
	sets, cached, err := f.readSets(ctx, keys, userID, first, before, n)
	if err != nil {
		return nil, 0, nil, err
	}
	if first {
		if celebs, err = f.celebrities(ctx, userID, cached); err != nil {
			return nil, 0, nil, err
		}
		if len(celebs) > 0 { // now the timelines too
			return f.readRedis(ctx, userID, celebs, false, before, n)
		}
	}
	rebuilt := false
	for i, set := range sets {
		if set.complete {
			continue
		}
		if i == 0 {
			err = f.rebuild(ctx, userID)
		} else {
			err = f.rebuildTimeline(ctx, celebs[i-1])
		}
		if err != nil {
			return nil, 0, nil, err
		}
		rebuilt = true
	}
	if rebuilt {
		if sets, _, err = f.readSets(ctx, keys, 0, false, before, n); err != nil {
			return nil, 0, nil, err
		}
		for _, set := range sets {
			if !set.complete { // another reader's rebuild is slow
				return nil, before, celebs, nil
			}
		}
	}

	seen := make(map[int64]bool, n*len(sets))
	for _, set := range sets {
		if len(set.ids) < n && !set.whole {
			last := before
			if len(set.ids) > 0 {
				last = set.ids[len(set.ids)-1]
			}
			floor = max(floor, last)
		}
		for _, id := range set.ids {
			if id >= floor && !seen[id] {
				seen[id] = true
				ids = append(ids, id)
			}
		}
	}
	slices.SortFunc(ids, func(a, b int64) int { return cmp.Compare(b, a) })
	if floor > 0 {
		for len(ids) > 0 && ids[len(ids)-1] < floor {
			ids = ids[:len(ids)-1]
		}
	}
	if len(ids) > n {
		ids, floor = ids[:n], 0
	}
	return ids, floor, celebs, nil
}

// readSets reads each sorted set's complete marker and up to n ids below
// before in one round trip, and keeps each alive for feed.active_days. With
// user > 0 it also reads that user's cached celebrity list.
func (f *Feeds) readSets(ctx context.Context, keys []string, user int64, withCelebs bool, before int64, n int) ([]sortedSet, *redis.StringSliceCmd, error) {
	markers := make([]*redis.FloatCmd, len(keys))
	wholes := make([]*redis.FloatCmd, len(keys))
	ranges := make([]*redis.StringSliceCmd, len(keys))
	var celebs *redis.StringSliceCmd
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, key := range keys {
			markers[i] = p.ZScore(ctx, key, completeMarker)
			wholes[i] = p.ZScore(ctx, key, wholeMarker)
			ranges[i] = p.ZRevRangeByScore(ctx, key, &redis.ZRangeBy{
				Max: "(" + strconv.FormatInt(before, 10), Min: "1", Count: int64(n), // post ids only
			})
			p.Expire(ctx, key, f.cfg.ActiveTTL) // a read keeps the feed
		}
		if withCelebs && f.cfg.CelebrityThreshold > 0 {
			celebs = p.SMembers(ctx, f.keys.celebrities(user))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, nil, fmt.Errorf("read feed: %w", err)
	}
	sets := make([]sortedSet, len(keys))
	for i := range keys {
		if markers[i].Err() != nil { // redis.Nil: no complete marker
			continue
		}
		sets[i].complete = true
		sets[i].whole = wholes[i].Err() == nil
		for _, m := range ranges[i].Val() {
			if id, err := strconv.ParseInt(m, 10, 64); err == nil {
				sets[i].ids = append(sets[i].ids, id)
			}
		}
	}
	return sets, celebs, nil
}

// tombstone is the post cache's value for a post that is deleted or missing.
const tombstone = "-"

// hydrate turns post ids into posts, in the same order, dropping deleted
// ones: one round trip to the post cache, and one to PostgreSQL for misses.
func (f *Feeds) hydrate(ctx context.Context, ids []int64) ([]Post, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, f.keys.post(id))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("hydrate posts: %w", err)
	}
	found := make(map[int64]Post, len(ids))
	dead := make(map[int64]bool)
	var missing []int64
	for i, c := range cmds {
		raw, err := c.Bytes()
		switch {
		case err == nil && string(raw) == tombstone:
			dead[ids[i]] = true
		case err != nil || len(raw) == 0 || raw[0] != '{':
			missing = append(missing, ids[i])
		default:
			found[ids[i]] = Post{ID: ids[i], cached: raw}
		}
	}
	if len(missing) > 0 {
		posts, err := f.store.PostsByID(ctx, missing)
		if err != nil {
			return nil, fmt.Errorf("hydrate posts: %w", err)
		}
		for _, p := range posts {
			found[p.ID] = p
		}
		f.cachePosts(ctx, posts, missing, found)
	}
	out := make([]Post, 0, len(ids))
	for _, id := range ids {
		if p, ok := found[id]; ok && !dead[id] {
			out = append(out, p)
		}
	}
	return out, nil
}

// cachePosts stores posts in the post cache, and tombstones for the ids among
// wanted that PostgreSQL did not return. A cache write that fails only costs
// a PostgreSQL read later, so it is logged, not returned.
func (f *Feeds) cachePosts(ctx context.Context, posts []Post, wanted []int64, found map[int64]Post) {
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, post := range posts {
			// SETNX: never over a tombstone, which a delete may have
			// written after these posts were read.
			if raw, err := json.Marshal(post); err == nil {
				p.SetNX(ctx, f.keys.post(post.ID), raw, f.cfg.PostTTL)
			}
		}
		for _, id := range wanted {
			if _, ok := found[id]; !ok {
				p.SetNX(ctx, f.keys.post(id), tombstone, f.cfg.PostTTL)
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		f.log.Warn("post cache write failed", zap.Error(err))
	}
}

// rebuild fills a feed that Redis does not have (lost, expired, never read)
// from PostgreSQL: the newest max_len posts of the people the user follows.
func (f *Feeds) rebuild(ctx context.Context, userID int64) error {
	return f.rebuildSet(ctx, f.keys.feed(userID), f.keys.rebuildLock(userID), func(ctx context.Context) ([]int64, []Post, error) {
		posts, err := f.store.FolloweePosts(ctx, userID, math.MaxInt64, f.cfg.MaxLen)
		ids := make([]int64, len(posts))
		for i, p := range posts {
			ids[i] = p.ID
		}
		return ids, posts, err
	})
}

// rebuildSet fills a missing sorted set (a feed or a timeline) with the ids
// load returns. One reader rebuilds; the others wait for it, up to
// RebuildWait. Posts pushed while load reads PostgreSQL are kept.
func (f *Feeds) rebuildSet(ctx context.Context, key, lock string, load func(context.Context) ([]int64, []Post, error)) error {
	token := randomToken()
	ok, err := f.rdb.SetNX(ctx, lock, token, 30*time.Second).Result()
	if err != nil {
		return fmt.Errorf("rebuild %s: lock: %w", key, err)
	}
	if !ok {
		return f.awaitRebuild(ctx, key)
	}
	defer func() {
		// Release on a fresh context: a cancelled read must not keep the lock.
		unlockCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = unlockScript.Run(unlockCtx, f.rdb, []string{lock}, token).Err() // expires anyway
	}()
	// Another reader may have rebuilt it between our read and our lock.
	if err := f.rdb.ZScore(ctx, key, completeMarker).Err(); err == nil {
		return nil
	} else if !errors.Is(err, redis.Nil) {
		return fmt.Errorf("rebuild %s: %w", key, err)
	}

	// The placeholder makes the key exist, so pushes from now on land in it.
	// It expires like a feed, should this rebuild never finish.
	if _, err := f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, key, redis.Z{Score: -1, Member: buildingMarker})
		p.Expire(ctx, key, f.cfg.ActiveTTL)
		return nil
	}); err != nil {
		return fmt.Errorf("rebuild %s: %w", key, err)
	}
	ids, posts, err := load(ctx)
	if err != nil {
		return fmt.Errorf("rebuild %s: %w", key, err)
	}
	whole := 0
	if len(ids) < f.cfg.MaxLen { // fewer than asked for: that is all there is
		whole = 1
	}
	args := make([]any, 0, len(ids)+3)
	args = append(args, f.cfg.MaxLen, int64(f.cfg.ActiveTTL/time.Second), whole)
	for _, id := range ids {
		args = append(args, id)
	}
	if err := finishRebuildScript.Run(ctx, f.rdb, []string{key}, args...).Err(); err != nil {
		return fmt.Errorf("rebuild %s: %w", key, err)
	}
	f.cachePosts(ctx, posts, nil, nil)
	return nil
}

// awaitRebuild waits until another reader's rebuild completed the set, or
// RebuildWait passed; the caller reads again and checks which.
func (f *Feeds) awaitRebuild(ctx context.Context, key string) error {
	deadline := time.Now().Add(f.cfg.RebuildWait)
	for time.Now().Before(deadline) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
		err := f.rdb.ZScore(ctx, key, completeMarker).Err()
		if err == nil {
			return nil
		}
		if !errors.Is(err, redis.Nil) {
			return fmt.Errorf("await rebuild of %s: %w", key, err)
		}
	}
	return nil
}

func randomToken() string {
	b := make([]byte, 12)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
