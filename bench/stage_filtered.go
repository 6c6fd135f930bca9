package bench

import (
	"context"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// The filtered-read scenario: readers of their own, shaped as the read
// stage's (Readers of them, ten authors with 200 posts each), whose feeds
// also hold reposts and who mute some of the people they follow, so that a
// read's two filters (feed.Feeds.shown) both work: hidden authors, and
// repeated originals (one PostgreSQL query a page with reposts).
const (
	filterAuthorBase   = 220 // authors 220..229, followed by every filtered reader
	reposterBase       = 230 // reposters 230..239, followed by every filtered reader
	filterForeign      = 240 // an author the filtered readers do not follow, whose posts they see reposted
	filterN            = 10
	filterBlocks       = 250     // blocks of the history below: 2,000 posts of the authors, as the read stage's
	filteredReaderBase = 600_000 // filtered readers 600000..
)

// filteredScenario is what the filtered readers' feeds are made of, and
// what the contract says each shows (the model the stage checks its pages
// against).
//
// The history is filterBlocks blocks, oldest first, ids ascending. Block b
// holds 8 posts of the authors (round robin), one post of filterForeign, and
// from the second block on two reposts: one of the first post of block b-1
// (an original the readers see: a repeat), and one of filterForeign's post
// of block 2⌊(b-1)/2⌋, which blocks 2m+1 and 2m+2 both repost (the first
// shows it, the second is a repeat). So a fifth of a feed's entries are
// reposts. Reader i mutes author i mod 10 and reposter (i+3) mod 10: a tenth
// of the posts and of the reposts are hidden, and a repost of a muted
// author's post too.
type filteredScenario struct {
	posts   []seedPost // oldest first
	readers []int64
	byID    map[int64]seedPost
}

func newFilteredScenario(firstID int64, readers int) *filteredScenario {
	s := &filteredScenario{byID: map[int64]seedPost{}}
	id := firstID
	add := func(author, repostOf int64, body string) int64 {
		p := seedPost{id: id, author: author, repostOf: repostOf, body: body}
		s.posts = append(s.posts, p)
		s.byID[id] = p
		id++
		return p.id
	}
	foreign := make([]int64, filterBlocks)
	var prevFirst int64 // the first post of the block before
	for b := range filterBlocks {
		first := int64(0)
		for j := range 8 {
			pid := add(int64(filterAuthorBase+(8*b+j)%filterN), 0, fmt.Sprintf("a post to read, filtered, block %d", b))
			if j == 0 {
				first = pid
			}
		}
		foreign[b] = add(filterForeign, 0, fmt.Sprintf("a post seen reposted, block %d", b))
		if b > 0 {
			add(int64(reposterBase+b%filterN), prevFirst, "")
			add(int64(reposterBase+(b+5)%filterN), foreign[2*((b-1)/2)], "")
		}
		prevFirst = first
	}
	for i := range readers {
		s.readers = append(s.readers, int64(filteredReaderBase+i))
	}
	return s
}

// followees are whom every filtered reader follows: the authors and the
// reposters.
func (s *filteredScenario) followees() []int64 {
	out := make([]int64, 0, 2*filterN)
	for i := range filterN {
		out = append(out, int64(filterAuthorBase+i), int64(reposterBase+i))
	}
	return out
}

// mutes are whom the i-th filtered reader mutes.
func (s *filteredScenario) mutes(i int) []int64 {
	return []int64{int64(filterAuthorBase + i%filterN), int64(reposterBase + (i+3)%filterN)}
}

// entryKind is what a read does with an entry of a feed.
type entryKind int

const (
	entryShown  entryKind = iota
	entryHidden           // its author, or its original's, is muted
	entryRepeat           // a repost whose original shows through an earlier entry
)

// feedEntry is an entry of a filtered reader's feed, with what the contract
// makes of it.
type feedEntry struct {
	id     int64
	repost bool
	kind   entryKind
}

// feed is every entry of the i-th reader's feed, newest first, each with
// its kind by the contract's definition (docs/API.md, "What a home feed
// holds"): entries are the posts and reposts of the people the reader
// follows; hidden, those whose author or original's author the reader
// mutes; a repost is a repeat when the original is an entry of a source
// (a followee not hidden) or an earlier repost by a source is.
func (s *filteredScenario) feed(i int) []feedEntry {
	muted, sources := map[int64]bool{}, map[int64]bool{}
	for _, m := range s.mutes(i) {
		muted[m] = true
	}
	for _, f := range s.followees() {
		sources[f] = !muted[f]
	}
	var out []feedEntry
	firstBy := map[int64]int64{} // original → its first repost by a source
	for _, p := range s.posts {
		if _, followed := sources[p.author]; !followed {
			continue
		}
		e := feedEntry{id: p.id, repost: p.repostOf != 0}
		switch {
		case muted[p.author] || e.repost && muted[s.byID[p.repostOf].author]:
			e.kind = entryHidden
		case e.repost:
			if _, earlier := firstBy[p.repostOf]; earlier || sources[s.byID[p.repostOf].author] {
				e.kind = entryRepeat
			} else {
				firstBy[p.repostOf] = p.id
			}
		}
		out = append(out, e)
	}
	slices.Reverse(out)
	return out
}

// firstPage is the ids of the first n entries the i-th reader's feed shows.
func (s *filteredScenario) firstPage(i, n int) []int64 {
	var ids []int64
	for _, e := range s.feed(i) {
		if e.kind == entryShown && len(ids) < n {
			ids = append(ids, e.id)
		}
	}
	return ids
}

// pageWork is what a read of the first page of limit entries does with
// feed (newest first), as feed.Feeds.Read reads: it asks Redis for the
// entries it still needs (limit+1 in all, the one more telling whether
// there is a next page), drops what the filters leave out, and asks again
// until it has them. rounds is the Redis reads, queries the PostgreSQL
// queries for repeats (one a round that holds a repost not hidden),
// spanned the entries it went through.
func pageWork(feed []feedEntry, limit int) (rounds, queries, spanned, reposts int) {
	want, have := limit+1, 0
	for have < want && spanned < len(feed) {
		n := want - have
		batch := feed[spanned:min(spanned+n, len(feed))]
		spanned += len(batch)
		rounds++
		asked := false
		for _, e := range batch {
			if e.repost {
				reposts++
				if e.kind != entryHidden {
					asked = true
				}
			}
			if e.kind == entryShown {
				have++
			}
		}
		if asked {
			queries++
		}
	}
	return rounds, queries, spanned, reposts
}

// filteredWork is the mean of pageWork over the scenario's readers.
type filteredWork struct {
	rounds, queries, spanned, reposts float64
}

func (s *filteredScenario) work(limit int) filteredWork {
	var w filteredWork
	for i := range s.readers {
		r, q, sp, rp := pageWork(s.feed(i), limit)
		w.rounds, w.queries, w.spanned, w.reposts = w.rounds+float64(r), w.queries+float64(q), w.spanned+float64(sp), w.reposts+float64(rp)
	}
	n := float64(max(len(s.readers), 1))
	return filteredWork{rounds: w.rounds / n, queries: w.queries / n, spanned: w.spanned / n, reposts: w.reposts / n}
}

// seedFiltered writes the filtered-read scenario straight into PostgreSQL,
// as the graph is seeded: the history (no outbox rows), the readers'
// follows and their mutes. Their feeds are built by their first reads.
func (r *runner) seedFiltered(ctx context.Context) (*filteredScenario, error) {
	if r.filtered != nil {
		return r.filtered, nil
	}
	first, err := r.reservePostIDs(ctx, len(newFilteredScenario(0, 0).posts))
	if err != nil {
		return nil, err
	}
	s := newFilteredScenario(first, r.opts.Readers)
	if err := r.copyPosts(ctx, s.posts, "seed filtered"); err != nil {
		return nil, err
	}
	var follows, mutes [][]any
	for i, reader := range s.readers {
		for _, f := range s.followees() {
			follows = append(follows, []any{f, reader})
		}
		for _, m := range s.mutes(i) {
			mutes = append(mutes, []any{reader, m})
		}
	}
	if _, err := r.pool.CopyFrom(ctx, pgx.Identifier{"follows"}, []string{"followee_id", "follower_id"}, pgx.CopyFromRows(follows)); err != nil {
		return nil, fmt.Errorf("seed filtered follows: %w", err)
	}
	if _, err := r.pool.CopyFrom(ctx, pgx.Identifier{"mutes"}, []string{"user_id", "muted_id"}, pgx.CopyFromRows(mutes)); err != nil {
		return nil, fmt.Errorf("seed mutes: %w", err)
	}
	if _, err := r.pool.Exec(ctx, `INSERT INTO follower_counts (user_id, followers)
		SELECT followee_id, count(*) FROM follows WHERE followee_id = ANY($1) GROUP BY followee_id
		ON CONFLICT (user_id) DO UPDATE SET followers = EXCLUDED.followers`, s.followees()); err != nil {
		return nil, fmt.Errorf("seed filtered follower counts: %w", err)
	}
	r.filtered = s
	return s, nil
}

// checkFiltered reads each filtered reader's first page through the API
// and requires what the scenario's model says it shows: otherwise the
// stage would not measure the filters it names.
func (r *runner) checkFiltered(ctx context.Context, s *filteredScenario) error {
	for i, reader := range s.readers {
		got, _, err := r.readFeedPage(ctx, reader, "")
		if err != nil {
			return err
		}
		if want := s.firstPage(i, 20); !slices.Equal(got, want) {
			return fmt.Errorf("filtered reader %d's first page: %v, the contract's: %v", reader, got, want)
		}
	}
	return nil
}
