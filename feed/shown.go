package feed

import (
	"bytes"
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/domain"
)

// A Redis feed holds every entry — post or repost — of the reader and of
// the people they follow; what it shows is less (docs/API.md, "What a home
// feed holds"): no entry whose author, or whose original's author, the
// reader hides (a mute, a block either way: the following hash's list,
// kept by hide.lua), and each original once, as its first entry. Hidden
// entries stay in the feed, so that an unmute shows them again at once.

// shown keeps, of posts (a page as the feed holds it, newest first), those
// the reader's feed shows. A page of posts without reposts, read by a
// reader who hides nobody — the common case — costs a byte search a post;
// reposts that remain cost one PostgreSQL query a page (Repeats), which
// also drops what was deleted since the post cache gave the page. It
// says what it left out, and why (the caller counts it, once).
func (f *Feeds) shown(ctx context.Context, r *feedReader, posts []domain.Post) (kept []domain.Post, left leftOut, err error) {
	hides := r.hides
	var reposts []int64
	out := posts[:0]
	for _, p := range posts {
		if len(hides) == 0 && p.JSON != nil && !bytes.Contains(p.JSON, repostKey) {
			out = append(out, p) // neither hidden nor a repost: no need to decode it
			continue
		}
		author, original, ok := p.Authors()
		if !ok {
			out = append(out, p) // not a post this version wrote: as it is
			continue
		}
		if len(hides) > 0 && (isHidden(hides, author) || original != 0 && isHidden(hides, original)) {
			left.hidden++
			continue
		}
		if original != 0 {
			reposts = append(reposts, p.ID)
		}
		out = append(out, p)
	}
	if len(reposts) == 0 {
		return out, left, nil
	}
	page := make([]int64, len(out))
	for i, p := range out {
		page[i] = p.ID
	}
	repeats, gone, err := f.store.Repeats(ctx, r.user, hides, reposts, page)
	if err != nil {
		return nil, left, fmt.Errorf("filter feed: %w", err)
	}
	// Repeats read the graph in PostgreSQL after Redis gave the page: a
	// follow, an unfollow, a mute or a block between the two would be
	// seen by one and not the other, and the page could show an original
	// twice, or not at all. Such a change is marked in flight from before
	// its commit until its application bumps the hash's version: unless
	// both are as the page found them, the page comes from PostgreSQL.
	if same, err := f.graphUnchanged(ctx, r); err != nil || !same {
		return nil, left, cmp.Or(err, errFromPostgres)
	}
	// Which entry of an original shows depends on what is deleted: the
	// page is kept as Repeats found it, without what was deleted since the
	// post cache gave it (an original and its reposts go together; the
	// caller makes sure the feed did not move meanwhile).
	kept = out[:0]
	for _, p := range out {
		if !repeats[p.ID] && !gone[p.ID] {
			kept = append(kept, p)
		}
	}
	left.repeats, left.deleted = len(repeats), len(gone)
	return kept, left, nil
}

// leftOut counts what a round read and does not show, by why.
type leftOut struct {
	hidden  int // its author, or its original's, hidden by the reader
	repeats int // its original shows through an earlier entry
	deleted int // deleted since the post cache gave it (Repeats)
}

// repostKey is in a post's JSON only as the key of a repost's original: in
// a string, JSON escapes the quote that would end it.
var repostKey = []byte(`"repost_of":`)

// graphUnchanged reports whether the reader's graph, as Redis holds it,
// is still at the version their read opened with, with no change in flight.
func (f *Feeds) graphUnchanged(ctx context.Context, r *feedReader) (bool, error) {
	var hash *redis.SliceCmd
	var mark *redis.IntCmd
	cmds, err := pipelinedReads(ctx, f.rdb, func(p redis.Pipeliner) error {
		hash = p.HMGet(ctx, f.keys.following(r.user), versionField, mergesField, hidesField)
		mark = f.markedNow(ctx, p, r.user)
		return nil
	})
	if err = failure(firstError(cmds, err)); err != nil {
		return false, fmt.Errorf("filter feed: %w", err)
	}
	if mark.Val() > 0 {
		return false, nil
	}
	v := hash.Val()
	if !hashComplete(v) {
		return false, nil
	}
	version, _ := v[0].(string)
	pending, _ := v[1].(string)
	return version == r.version && (pending == "" || pending == "0"), nil
}

func isHidden(hides []int64, user int64) bool {
	_, found := slices.BinarySearch(hides, user)
	return found
}

// ApplyHide applies a hide state to the reader's feed unless a newer one is
// there (applied is false then). A feed that is not complete is dropped,
// and its next read rebuilds it with the state.
func (f *Feeds) ApplyHide(ctx context.Context, st domain.HideState) (applied bool, err error) {
	keys := append(f.keys.feedSet(st.Reader).list(), f.keys.following(st.Reader))
	n, err := hideScript.Run(ctx, f.rdb, keys, st.Other, st.Version, flag(st.Hidden)).Int()
	if err != nil {
		return false, fmt.Errorf("apply hide of %d to feed %d: %w", st.Other, st.Reader, err)
	}
	return n != -2, nil
}

// Hides returns the users whose entries reader's feed hides, ascending;
// known is false when Redis does not hold the reader's feed complete.
func (f *Feeds) Hides(ctx context.Context, reader int64) (hides []int64, known bool, err error) {
	v, err := f.rdb.HMGet(ctx, f.keys.following(reader), versionField, mergesField, hidesField).Result()
	if err != nil {
		return nil, false, fmt.Errorf("hides of %d: %w", reader, err)
	}
	if !hashComplete(v) {
		return nil, false, nil
	}
	raw, _ := v[2].(string)
	return parseHides(raw), true, nil
}

// hashComplete tells, from HMGET of the following hash's version, merges
// and hides fields, whether the hash is complete and of this version.
func hashComplete(v []any) bool {
	if len(v) != 3 {
		return false
	}
	_, hasVersion := v[0].(string)
	_, hasHides := v[2].(string)
	return hasVersion && hasHides
}

// parseHides reads the hides field (parseIDs), ascending.
func parseHides(s string) []int64 {
	ids := parseIDs(s)
	slices.Sort(ids)
	return ids
}

// joinIDs writes ids as the hides field holds them.
func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ",")
}
