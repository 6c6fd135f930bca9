package feed

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sort"

	"github.com/redis/go-redis/v9"
	"golang.org/x/sync/errgroup"

	"github.com/newsfeed/newsfeed/domain"
)

// maxPulledSources bounds the celebrity timelines one read merges. A reader
// who follows more celebrities than this is served from PostgreSQL, so that
// no read does unbounded work in Redis.
const maxPulledSources = 100

// errFromPostgres says that Redis cannot serve (the rest of) a page; the
// truth in PostgreSQL does.
var errFromPostgres = errors.New("read from PostgreSQL")

// Read returns up to limit entries of userID's home feed with id < before
// (before <= 0 reads from the newest), newest first, as docs/API.md defines
// the feed: the user's feed merged with the timelines of the celebrities
// they follow, and past what Redis keeps, PostgreSQL. (The scripts keep
// every post of an author the reader does not follow out of the feed,
// atomically with the following hash; what the reader hides, and reposts
// of an original that shows already, are filtered here: shown.)
func (f *Feeds) Read(ctx context.Context, userID, before int64, limit int) (domain.FeedPage, error) {
	if before <= 0 {
		before = math.MaxInt64
	}
	want := limit + 1 // one more tells whether there is a next page
	posts := make([]domain.Post, 0, want)
	r := &feedReader{f: f, user: userID}
	lost := 0 // what the last round read and did not keep
	deleted := false
	for cursor := before; len(posts) < want; {
		n := want - len(posts)
		if lost > 0 {
			// A round that lost entries (deleted, hidden, repeated) is
			// likely followed by others that do: read further ahead, so
			// that a filtered page takes fewer rounds (extra posts are cut).
			n *= 2
		}
		res, err := r.round(ctx, cursor, n)
		ids, floor := res.ids, res.floor
		lost = len(ids) - len(res.kept)
		posts = append(posts, res.kept...)
		if err == nil && (deleted || res.deleted) && cursor != before {
			// Each round is at one moment, but not the same: one that saw
			// a delete would join another of before it.
			err = errFromPostgres
		}
		deleted = deleted || res.deleted
		if errors.Is(err, errFromPostgres) {
			floor = cursor // nothing sure in Redis below the cursor
		} else if err != nil {
			return domain.FeedPage{}, err
		}
		if floor == 0 {
			if len(ids) < n {
				break // every source holds its whole history: there is no more
			}
			cursor = ids[len(ids)-1] // some were deleted: read on in Redis
			continue
		}
		// Redis holds nothing sure below floor: the page comes from the
		// truth, whole — not what Redis gave above floor and PostgreSQL the
		// rest: a follow or an unfollow that commits between the two reads
		// would show in one half and not in the other. One query reads one
		// snapshot, so the page is the feed at one moment.
		if posts, err = f.store.FolloweePosts(ctx, userID, before, want); err != nil {
			return domain.FeedPage{}, fmt.Errorf("read feed %d: %w", userID, err)
		}
		break
	}
	page := domain.FeedPage{Posts: posts}
	if len(posts) > limit {
		page.Posts = posts[:limit]
		page.Next = posts[limit-1].ID
	}
	return page, nil
}

// round reads up to n entries below before (next) and keeps those the feed
// shows: their posts, without the deleted ones (hydrate) and those the
// reader does not see (shown). The ids come first and whether a post is
// deleted later: a delete seen in between, after a push the ids did not
// hold yet, would make a page of no moment (the push's post missing, the
// delete's too). So when a round drops a post as deleted, the sources are
// read again: unchanged, the page is the feed as of the hydration; moved,
// the round is read again, up to roundTries times, and then the page comes
// from PostgreSQL. What the accepted try left out is counted.
func (r *feedReader) round(ctx context.Context, before int64, n int) (res roundResult, err error) {
	for range roundTries {
		if res.ids, res.floor, err = r.next(ctx, before, n); err != nil {
			return roundResult{}, err
		}
		if res.kept, err = r.f.hydrate(ctx, res.ids); err != nil {
			return roundResult{}, err
		}
		deleted := len(res.ids) - len(res.kept)
		var left leftOut
		if res.kept, left, err = r.f.shown(ctx, r, res.kept); err != nil {
			return roundResult{}, err
		}
		res.deleted = deleted+left.deleted > 0
		settled := !res.deleted || res.floor > 0 // floor: the page comes from PostgreSQL anyway
		if !settled {
			again, againFloor, err := r.next(ctx, before, n)
			if err != nil {
				return roundResult{}, err
			}
			settled = againFloor == res.floor && slices.Equal(again, res.ids)
		}
		if settled {
			r.f.metrics.filtered(reasonHidden, left.hidden)
			r.f.metrics.filtered(reasonRepeat, left.repeats)
			return res, nil
		}
	}
	return roundResult{}, errFromPostgres
}

// roundResult is what a round read (ids, and the floor next gave them) and
// kept, and whether it left out a post as deleted.
type roundResult struct {
	ids     []int64
	floor   int64
	kept    []domain.Post
	deleted bool
}

// roundTries bounds how often a round whose sources moved while it read
// them is read again.
const roundTries = 3

// feedReader reads one page from Redis: the reader's feed and the timelines
// of the celebrities they follow, learned on the first call.
type feedReader struct {
	f      *Feeds
	user   int64
	opened bool
	celebs []int64
	hides  []int64 // users whose entries the reader's feed hides
	// version is the following hash's version when the feed was opened.
	version string
}

// sourceSet is what one Redis source of a home feed gave for a page.
type sourceSet struct {
	ids []int64
	// complete: the set is a complete prefix (for the feed: with its
	// following hash).
	complete bool
	// whole: the set holds its whole history, so running out of it does
	// not mean PostgreSQL has more.
	whole bool
}

// readMeta is what the first read of a page learns besides the sets.
type readMeta struct {
	followingVersion string // "" when the following hash is missing
	hides            []int64
	celebCache       string // "" when not cached
	pulledCount      int64
	pulledComplete   bool
}

// next reads up to n post ids below before from the sources, merged newest
// first without duplicates. A source that ran out is whole in Redis only
// down to its last id: floor is then the highest such id (or before, when
// one gave nothing), and only ids >= floor are returned; PostgreSQL goes on
// below it. floor is 0 when Redis had n sure ids, or when every source that
// ran out holds its whole history (then fewer than n ids are all there is).
// Missing sources are rebuilt first; errFromPostgres says Redis cannot
// serve this read (a rebuild by another reader is slow, too many sources).
func (r *feedReader) next(ctx context.Context, before int64, n int) (ids []int64, floor int64, err error) {
	f := r.f
	var sets []sourceSet
	if !r.opened {
		feedOnly, err := r.open(ctx, before, n)
		if err != nil {
			return nil, 0, err
		}
		if len(r.celebs) == 0 {
			sets = feedOnly // the one source, read already
		}
	}
	keys := []setKeys{f.keys.feedSet(r.user)}
	for _, c := range r.celebs {
		keys = append(keys, f.keys.timelineSet(c))
	}
	if sets == nil {
		if sets, err = r.readSets(ctx, keys, before, n); err != nil {
			return nil, 0, err
		}
	}
	if sets, err = r.rebuildMissing(ctx, keys, sets, before, n); err != nil {
		return nil, 0, err
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
			if !seen[id] {
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
	return ids, floor, nil
}

// open makes sure the reader's feed is complete (rebuilding it if not),
// learns which celebrities they follow, and returns the feed's source as
// read.
func (r *feedReader) open(ctx context.Context, before int64, n int) ([]sourceSet, error) {
	f := r.f
	keys := []setKeys{f.keys.feedSet(r.user)}
	sets, meta, err := f.readSets(ctx, r.user, keys, before, n, true)
	if err != nil {
		return nil, err
	}
	if !sets[0].complete {
		// A reader who follows many keeps no feed (markFollowsMany).
		if many, err := f.followsManyMarked(ctx, r.user); err != nil || many {
			return nil, cmp.Or(err, errFollowsMany)
		}
		if err := f.rebuildFeed(ctx, r.user); err != nil {
			return nil, err
		}
		if sets, meta, err = f.readSets(ctx, r.user, keys, before, n, true); err != nil {
			return nil, err
		}
		if !sets[0].complete { // another reader's rebuild is slow
			return nil, errFromPostgres
		}
	}
	if r.celebs, err = f.celebrities(ctx, r.user, meta); err != nil {
		return nil, err
	}
	r.hides, r.version = meta.hides, meta.followingVersion
	r.opened = true
	if len(r.celebs) > maxPulledSources {
		return nil, errFromPostgres
	}
	return sets, nil
}

// readSets is Feeds.readSets for a page's later reads: the following hash
// must be at the version the page opened with, or the page would show one
// graph above and another below (an unfollow applied between two rounds);
// if it moved, the page comes from PostgreSQL.
func (r *feedReader) readSets(ctx context.Context, keys []setKeys, before int64, n int) ([]sourceSet, error) {
	sets, meta, err := r.f.readSets(ctx, r.user, keys, before, n, false)
	if err != nil {
		return nil, err
	}
	if meta.followingVersion != r.version {
		return nil, errFromPostgres
	}
	return sets, nil
}

// rebuildMissing rebuilds the sources that are not complete, all at once,
// and reads them again.
func (r *feedReader) rebuildMissing(ctx context.Context, keys []setKeys, sets []sourceSet, before int64, n int) ([]sourceSet, error) {
	f := r.f
	g, gctx := errgroup.WithContext(ctx)
	missing := false
	for i, set := range sets {
		if set.complete {
			continue
		}
		missing = true
		if i == 0 {
			g.Go(func() error { return f.rebuildFeed(gctx, r.user) })
		} else {
			author := r.celebs[i-1]
			g.Go(func() error { return f.rebuildTimeline(gctx, author) })
		}
	}
	if !missing {
		return sets, nil
	}
	if err := g.Wait(); err != nil {
		return nil, err
	}
	sets, err := r.readSets(ctx, keys, before, n)
	if err != nil {
		return nil, err
	}
	for _, set := range sets {
		if !set.complete { // another reader's rebuild is slow
			return nil, errFromPostgres
		}
	}
	return sets, nil
}

// readSets reads each set (its meta, head and the tail's chunks the page
// needs, at one moment: readScript) in one round trip, keeps up to
// n ids below before,, and keeps each alive for feed.active_days; keys[0] is the
// user's feed, complete only with its following hash (which lives
// feed.active_days from its last change: an active reader's feed is rebuilt
// that often). withMeta also reads what the first read of a page needs when
// celebrities are pulled: the cached celebrity list and the state of the
// set of pulled authors.
func (f *Feeds) readSets(ctx context.Context, user int64, keys []setKeys, before int64, n int, withMeta bool) ([]sourceSet, readMeta, error) {
	reads := make([]setRead, len(keys))
	var following *redis.SliceCmd
	var celebs *redis.StringCmd
	var marked *redis.IntCmd
	var pulledCount *redis.IntCmd
	var pulledComplete *redis.BoolCmd
	cmds, err := pipelinedReads(ctx, f.rdb, func(p redis.Pipeliner) error {
		for i, key := range keys {
			reads[i] = readSet(ctx, p, key, before, n, f.cfg.ActiveTTL) // a read keeps the feed
		}
		following = p.HMGet(ctx, f.keys.following(user), versionField, mergesField, hidesField)
		marked = f.markedNow(ctx, p, user)
		if withMeta && f.cfg.CelebrityThreshold > 0 {
			celebs = p.Get(ctx, f.keys.celebrities(user))
			pulledCount = p.SCard(ctx, f.keys.pulled())
			pulledComplete = p.SIsMember(ctx, f.keys.pulled(), completeMarker)
		}
		return nil
	})
	if err = failure(firstError(cmds, err)); err != nil {
		return nil, readMeta{}, fmt.Errorf("read feed: %w", err)
	}
	// The hash's version (missing: the feed is not complete), the merges
	// of follows pending (see markMerge in lua/common.lua) and the graph
	// changes in flight (MarkGraphChange): while one is, the feed may show
	// a change half applied, or not yet, and the page comes from
	// PostgreSQL.
	if marked.Val() > 0 {
		return nil, readMeta{}, errFromPostgres
	}
	var version string
	var hides []int64
	if v := following.Val(); len(v) == 3 && hashComplete(v) {
		version, _ = v[0].(string)
		if pending, _ := v[1].(string); pending != "" && pending != "0" {
			return nil, readMeta{}, errFromPostgres
		}
		raw, _ := v[2].(string)
		hides = parseHides(raw)
	}
	sets := make([]sourceSet, len(keys))
	for i := range keys {
		set, err := reads[i].decode()
		if err != nil {
			return nil, readMeta{}, fmt.Errorf("read feed: %w", err)
		}
		if !set.complete {
			continue
		}
		sets[i].complete = i > 0 || version != ""
		sets[i].whole = set.whole
		// Newest first below before, up to n.
		for j := sort.Search(len(set.ids), func(j int) bool { return set.ids[j] >= before }) - 1; j >= 0 && len(sets[i].ids) < n; j-- {
			sets[i].ids = append(sets[i].ids, set.ids[j])
		}
	}
	meta := readMeta{followingVersion: version, hides: hides}
	if celebs != nil {
		meta.celebCache = celebs.Val()
		meta.pulledCount = pulledCount.Val()
		meta.pulledComplete = pulledComplete.Val()
	}
	return sets, meta, nil
}

// firstError is the first error of a pipeline that is not redis.Nil (a
// member or key that is not there): Pipelined returns the first error of
// any kind, which would hide a real one behind a missing marker.
func firstError(cmds []redis.Cmder, err error) error {
	if err == nil {
		return nil
	}
	for _, c := range cmds {
		if e := c.Err(); e != nil && !isNil(e) {
			return e
		}
	}
	if isNil(err) {
		return nil
	}
	return err
}
