package bench

import (
	"context"
	"io"
	"math"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/store"
)

// TestFilteredScenario: the filtered readers' feeds hold what the stage
// says — a fifth reposts, a tenth of the posts hidden, repeats of both
// kinds — and each first page needs both filters.
func TestFilteredScenario(t *testing.T) {
	s := newFilteredScenario(1000, 20)
	require.Len(t, s.posts, filterBlocks*11-2, "block 0 has no reposts")
	seen := map[[2]int64]bool{}
	for _, p := range s.posts {
		if p.repostOf != 0 {
			key := [2]int64{p.author, p.repostOf}
			require.False(t, seen[key], "a user reposts a post once (posts_one_repost_idx)")
			seen[key] = true
			require.Less(t, p.repostOf, p.id)
			require.Zero(t, s.byID[p.repostOf].repostOf, "a repost reposts an original")
		}
	}
	for i := range s.readers {
		feed := s.feed(i)
		require.Len(t, feed, filterBlocks*10-2, "entries: the followees' posts and reposts, not the foreign author's")
		count := map[entryKind]int{}
		reposts, shownReposts := 0, 0
		for j, e := range feed {
			count[e.kind]++
			if j > 0 {
				require.Less(t, e.id, feed[j-1].id, "newest first")
			}
			if e.repost {
				reposts++
				if e.kind == entryShown {
					shownReposts++
				}
			}
		}
		require.Equal(t, filterBlocks*2-2, reposts)
		// Hidden: the muted author's 200 posts, the muted reposter's ~50
		// reposts, and the reposts of the muted author's posts.
		require.InDelta(t, 275, count[entryHidden], 30, "reader %d", i)
		require.Positive(t, count[entryRepeat], "reader %d", i)
		// Foreign posts show once each (reposted twice, the second a repeat
		// unless the first's reposter is muted).
		require.InDelta(t, filterBlocks/2, shownReposts, 15, "reader %d", i)

		rounds, queries, spanned, inPage := pageWork(feed, 20)
		require.Greater(t, spanned, 21, "the filters leave entries out of every first page")
		require.Positive(t, inPage, "every first page holds reposts")
		require.GreaterOrEqual(t, rounds, 2)
		require.Positive(t, queries)
		require.LessOrEqual(t, queries, rounds)
		require.Len(t, s.firstPage(i, 20), 20)
	}
}

// TestPageWork: a read asks Redis for what it still needs until it has
// limit+1 entries to show, and PostgreSQL once a round that holds a repost
// not hidden.
func TestPageWork(t *testing.T) {
	shown, hidden := feedEntry{kind: entryShown}, feedEntry{kind: entryHidden}
	repost, hiddenRepost := feedEntry{repost: true, kind: entryRepeat}, feedEntry{repost: true, kind: entryHidden}
	f := func(es ...feedEntry) []feedEntry { return es }

	rounds, queries, spanned, reposts := pageWork(f(shown, shown, shown, shown), 2)
	require.Equal(t, []int{1, 0, 3, 0}, []int{rounds, queries, spanned, reposts}, "no filter: one round of limit+1")

	// Round 1 takes 3 (one hidden, one a repeat: a query), round 2 the 2
	// it lacks (a hidden repost: no query), round 3 the last 1.
	rounds, queries, spanned, reposts = pageWork(f(shown, hidden, repost, shown, hiddenRepost, shown, shown), 2)
	require.Equal(t, []int{3, 1, 6, 2}, []int{rounds, queries, spanned, reposts})

	rounds, _, spanned, _ = pageWork(f(hidden, hidden), 5)
	require.Equal(t, []int{1, 2}, []int{rounds, spanned}, "the feed ran out")
}

// TestFilteredScenarioIsTheContract: seeded into PostgreSQL, the scenario's
// first pages are what the contract's SQL (store.FolloweePosts, the
// fallback's query) shows, so the stage's check of the API's pages against
// the model checks them against the contract.
func TestFilteredScenarioIsTheContract(t *testing.T) {
	ctx := context.Background()
	pool := testenv.NewPool(t)
	r := &runner{pool: pool, db: store.New(pool, nil), progress: &lockedWriter{w: io.Discard}, opts: Options{Readers: 12}}
	s, err := r.seedFiltered(ctx)
	require.NoError(t, err)
	again, err := r.seedFiltered(ctx)
	require.NoError(t, err)
	require.Same(t, s, again, "seeded once")
	for i, reader := range s.readers {
		page, err := r.db.FolloweePosts(ctx, reader, math.MaxInt64, 21)
		require.NoError(t, err)
		ids := make([]int64, len(page))
		for j, p := range page {
			ids[j] = p.ID
		}
		require.Equal(t, s.firstPage(i, 21), ids, "reader %d", reader)
	}
}
