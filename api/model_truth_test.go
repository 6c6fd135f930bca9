package api_test

import (
	"cmp"
	"fmt"
	"slices"
)

// The truth of the model-based tests (TestFeedModel, TestFeedModelConcurrent):
// the home feed as docs/API.md, "What a home feed holds", defines it — a
// pure function of the posts, reposts, follows, mutes and blocks — computed
// from what a model recorded of them, never from the product's queries.

// truthPost is a post or a repost as a model records it.
type truthPost struct {
	id, author int64
	repostOf   int64 // the original a repost reposts; 0 for a post
	deleted    bool
}

// relations is whom users follow, mute and block, as a model records it.
type relations interface {
	follows(follower, followee int64) bool
	mutes(user, muted int64) bool
	blocks(blocker, blocked int64) bool
}

// hides reports whether u's home feed hides the entries of x: u mutes x, or
// a block stands between them, either way.
func hides(rel relations, u, x int64) bool {
	return x != u && (rel.mutes(u, x) || rel.blocks(u, x) || rel.blocks(x, u))
}

// homeFeed is u's home feed, newest first, with ids below before (0: all):
//   - an entry is a post or a repost, not deleted, by u or someone u follows;
//   - it is hidden when its author, or its original's author, is muted by u
//     or blocks u or is blocked by u; a deleted post hides its reposts;
//   - of the entries left, each original shows once: as the one with the
//     lowest id among the post itself and its reposts.
//
// The cut at before comes after the third rule: a page below a cursor shows
// what the whole feed shows below it.
func homeFeed(u int64, posts []truthPost, rel relations, before int64) []int64 {
	byID := make(map[int64]truthPost, len(posts))
	for _, p := range posts {
		byID[p.id] = p
	}
	shown := make(map[int64]int64) // original → the entry that shows it
	for _, p := range posts {
		if why := hiddenEntry(u, byID, rel, p); why != "" {
			continue
		}
		orig := cmp.Or(p.repostOf, p.id)
		if cur, ok := shown[orig]; !ok || p.id < cur {
			shown[orig] = p.id
		}
	}
	var ids []int64
	for _, id := range shown {
		if before == 0 || id < before {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b int64) int { return cmp.Compare(b, a) })
	return ids
}

// hiddenEntry says why p is not an entry of u's feed that may show (empty:
// it is one): the first two rules of homeFeed.
func hiddenEntry(u int64, byID map[int64]truthPost, rel relations, p truthPost) string {
	switch {
	case p.deleted:
		return "deleted"
	case p.author != u && !rel.follows(u, p.author):
		return fmt.Sprintf("by %d, not followed", p.author)
	case hides(rel, u, p.author):
		return fmt.Sprintf("by %d, %s", p.author, hideReason(rel, u, p.author))
	}
	if p.repostOf == 0 {
		return ""
	}
	o, ok := byID[p.repostOf]
	switch {
	case !ok:
		return fmt.Sprintf("a repost of %d, unknown to the model", p.repostOf)
	case o.deleted:
		return fmt.Sprintf("a repost of %d, deleted", o.id)
	case hides(rel, u, o.author):
		return fmt.Sprintf("a repost of %d by %d, %s", o.id, o.author, hideReason(rel, u, o.author))
	}
	return ""
}

func hideReason(rel relations, u, x int64) string {
	switch {
	case rel.mutes(u, x):
		return "muted"
	case rel.blocks(u, x):
		return "blocked"
	default:
		return "blocking the reader"
	}
}

// heldEntries is what u's feed in Redis holds when it is whole (a rebuild
// loads its newest feed.max_len): every live entry by u or someone u
// follows, hidden or repeated ones too (reads filter them), newest first.
func heldEntries(u int64, posts []truthPost, rel relations) []int64 {
	var ids []int64
	for _, p := range posts {
		if !p.deleted && (p.author == u || rel.follows(u, p.author)) {
			ids = append(ids, p.id)
		}
	}
	slices.SortFunc(ids, func(a, b int64) int { return cmp.Compare(b, a) })
	return ids
}

func findPost(posts []truthPost, id int64) (truthPost, bool) {
	for _, p := range posts {
		if p.id == id {
			return p, true
		}
	}
	return truthPost{}, false
}

// explainFeed says how a read of u's feed differs from the truth: what it
// shows that it should not (and why not), and what it misses.
func explainFeed(u int64, posts []truthPost, rel relations, got, want []int64) string {
	var extra, missing []string
	for i, id := range got {
		if slices.Contains(got[:i], id) {
			extra = append(extra, fmt.Sprintf("%d (a duplicate)", id))
			continue
		}
		if slices.Contains(want, id) {
			continue
		}
		p, ok := findPost(posts, id)
		byID := make(map[int64]truthPost, len(posts))
		for _, p := range posts {
			byID[p.id] = p
		}
		why := hiddenEntry(u, byID, rel, p)
		switch {
		case !ok:
			why = "not a post of this test"
		case why == "":
			orig := cmp.Or(p.repostOf, p.id)
			for _, q := range homeFeed(u, posts, rel, 0) {
				if r, _ := findPost(posts, q); cmp.Or(r.repostOf, r.id) == orig {
					why = fmt.Sprintf("%d shows its original %d", q, orig)
				}
			}
		}
		extra = append(extra, fmt.Sprintf("%d (%s)", id, why))
	}
	for _, id := range want {
		if !slices.Contains(got, id) {
			p, _ := findPost(posts, id)
			what := fmt.Sprintf("by %d", p.author)
			if p.repostOf != 0 {
				what += fmt.Sprintf(", a repost of %d", p.repostOf)
			}
			missing = append(missing, fmt.Sprintf("%d (%s)", id, what))
		}
	}
	return fmt.Sprintf("shows %v that it should not, misses %v", extra, missing)
}

// relationSet is a record of relations: pairs [user, other] that hold.
type relationSet struct {
	follow, mute, block map[[2]int64]bool
}

func newRelationSet() relationSet {
	return relationSet{follow: map[[2]int64]bool{}, mute: map[[2]int64]bool{}, block: map[[2]int64]bool{}}
}

func (r relationSet) follows(a, b int64) bool { return r.follow[[2]int64{a, b}] }
func (r relationSet) mutes(a, b int64) bool   { return r.mute[[2]int64{a, b}] }
func (r relationSet) blocks(a, b int64) bool  { return r.block[[2]int64{a, b}] }

// blocked reports whether a block stands between a and b, either way.
func (r relationSet) blocked(a, b int64) bool { return r.blocks(a, b) || r.blocks(b, a) }
