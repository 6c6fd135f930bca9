package e2e

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
)

// requireLaggingReplica skips without a replica (NEWSFEED_TEST_REPLICA_URL),
// and fails when the replica does not lag: what these tests show needs a
// lag, which make test sets (make cluster-up APPLY_DELAY=2s).
func (c *cluster) requireLaggingReplica() {
	c.t.Helper()
	testenv.SkipWithoutReplica(c.t)
	require.NotEmpty(c.t, c.readURL)
	if d := testenv.ReplicaApplyDelay(c.t); d < time.Second {
		c.t.Fatalf("the replica at %s applies commits %s late; this test needs a second or more: make cluster-up APPLY_DELAY=2s",
			testenv.ReplicaURL(), d)
	}
}

// onReplica reports whether the test's database on the replica has a row
// (a count query), read directly.
func (c *cluster) onReplica(sql string, args ...any) bool {
	c.t.Helper()
	pool := testenv.Pool(c.t, c.readURL)
	defer pool.Close()
	var n int
	require.NoError(c.t, pool.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n > 0
}

// listIDs reads the first page of a listing and returns its ids (user_id of
// follows, id of posts).
func (c *client) listIDs(path string) []int64 {
	c.t.Helper()
	status, out := c.do("GET", path+"?limit=100", nil)
	require.Equal(c.t, http.StatusOK, status, string(out))
	var pg struct {
		Items []struct {
			ID     int64 `json:"id"`
			UserID int64 `json:"user_id"`
		} `json:"items"`
	}
	require.NoError(c.t, json.Unmarshal(out, &pg))
	ids := make([]int64, len(pg.Items))
	for i, it := range pg.Items {
		ids[i] = max(it.ID, it.UserID)
	}
	return ids
}

func usersPath(id int64, listing string) string {
	return "/v1/users/" + strconv.FormatInt(id, 10) + "/" + listing
}

// rounds is how many times a replica test repeats its writes and reads to
// see them within the replica's lag: on a loaded machine a round can take
// longer than the lag, and then shows nothing.
const rounds = 10

// TestReadYourWritesAcrossServeProcesses: with the replica lagging, a caller
// who writes through one serve process sees the write at once in their
// listings read through another — their following, the followee's
// followers, their posts — which the replica does not have yet.
func TestReadYourWritesAcrossServeProcesses(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.requireLaggingReplica()
	writer, reader := c.start("serve"), c.start("serve")
	const alice = 11
	onWriter, onReader := writer.client(alice), reader.client(alice)

	provenUnderLag := false
	for round := range rounds {
		followee := int64(1000 + round)
		onWriter.follow(followee)
		require.Contains(t, onReader.listIDs(usersPath(alice, "following")), followee, "round %d", round)
		require.Contains(t, onReader.listIDs(usersPath(followee, "followers")), int64(alice), "round %d", round)
		p := onWriter.post("round " + strconv.Itoa(round))
		require.Contains(t, onReader.listIDs(usersPath(alice, "posts")), p.ID, "round %d", round)

		// The replica still lacks the post after the reads: they were the
		// primary's (the follow came before: it may be replayed by now).
		if !c.onReplica("SELECT count(*) FROM posts WHERE id = $1", p.ID) {
			provenUnderLag = true
			break
		}
		t.Logf("round %d took longer than the replica's lag; again", round)
	}
	require.True(t, provenUnderLag, "in %d rounds the replica replayed every write before it was read back", rounds)
	require.Positive(t, reader.metric(`newsfeed_read_primary_fallback_total{reason="lagging"}`))
}

// TestOtherUsersSeeTheLag: with the replica lagging, another user's read of
// the same listing through the same serve process may miss the write for as
// long as the replica lags — what read-your-writes does not promise — and
// shows it once the replica replayed it. It fails if listings read the
// primary (then nobody would see the lag).
func TestOtherUsersSeeTheLag(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	c.requireLaggingReplica()
	writer, reader := c.start("serve"), c.start("serve")
	const alice, carol = 21, 22
	onWriter, carolOnReader := writer.client(alice), reader.client(carol)

	sawStale := false
	var followee int64
	for round := range rounds {
		followee = int64(2000 + round)
		onWriter.follow(followee)
		seen := carolOnReader.listIDs(usersPath(alice, "following"))
		replicated := c.onReplica("SELECT count(*) FROM follows WHERE follower_id = $1 AND followee_id = $2", alice, followee)
		switch {
		case !contains(seen, followee):
			sawStale = true
		case !replicated:
			t.Fatalf("round %d: carol saw alice's follow before the replica had it: her listing read the primary", round)
		default:
			t.Logf("round %d took longer than the replica's lag; again", round)
		}
		if sawStale {
			break
		}
	}
	require.True(t, sawStale, "in %d rounds carol never read alice's following before the replica had the follow", rounds)

	deadline := time.Now().Add(time.Minute)
	for !contains(carolOnReader.listIDs(usersPath(alice, "following")), followee) {
		require.True(t, time.Now().Before(deadline), "the replica did not show alice's follow within a minute")
		time.Sleep(100 * time.Millisecond)
	}
}

func contains(ids []int64, id int64) bool {
	for _, x := range ids {
		if x == id {
			return true
		}
	}
	return false
}
