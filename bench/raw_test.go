package bench

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

func TestMarkerMember(t *testing.T) {
	for _, v := range []int{0, 1, 64, 1000} {
		require.Greater(t, len(markerMember(v)), v)
	}
	require.True(t, strings.HasPrefix(markerMember(64), "raw-skiplist-marker:"))
}

// TestRawSetsSkiplist: the raw sorted sets are skiplists whatever the
// server keeps in listpacks, hold exactly what they were filled with, and
// take the timed writes above it.
func TestRawSetsSkiplist(t *testing.T) {
	ctx := context.Background()
	rdb, prefix := testenv.NewRedis(t)
	r := &runner{rdb: rdb, h: Harness{Prefix: prefix}, opts: Options{PageSize: 4}}
	sets := r.rawSets("raw", 4)

	enc, err := sets.create(ctx, []int64{100, 110, 120, 130, 140}) // 5 members: a listpack by default
	require.NoError(t, err)
	require.Equal(t, "skiplist", enc)
	members, err := rdb.ZRange(ctx, sets.key(3), 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"100", "110", "120", "130", "140"}, members, "the marker is gone")

	_, err = sets.write(ctx, 8, 2, 1000) // 2 pages of 4: members 1000 and 1001 into each set
	require.NoError(t, err)
	members, err = rdb.ZRange(ctx, sets.key(0), 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"100", "110", "120", "130", "140", "1000", "1001"}, members)

	fresh := r.rawSets("fresh", 2)
	enc, err = fresh.create(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, "skiplist", enc, "a set of nothing keeps its marker")
	n, err := rdb.ZCard(ctx, fresh.key(1)).Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)

	require.NoError(t, sets.drop(ctx))
	require.NoError(t, fresh.drop(ctx))
	left, err := rdb.Exists(ctx, sets.key(0), sets.key(3), fresh.key(0)).Result()
	require.NoError(t, err)
	require.Zero(t, left)
}
