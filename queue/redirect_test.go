package queue_test

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/internal/testenv"
	"github.com/newsfeed/newsfeed/queue"
)

// On the Redis Cluster, the queue's commands follow a slot being moved, one
// slot on purpose, the way `redis-cli --cluster reshard` moves each: the
// slot of the queue's stream is set IMPORTING on another primary and
// MIGRATING on its own, and the stream is moved with MIGRATE. Its old
// primary still owns the slot, and answers a command for the stream, which
// it no longer has, with ASK: publishing, reading, touching, asking whether
// tickets are held and acknowledging (a MULTI) must all be sent on to the
// new primary, with ASKING, and work. Then the slot is given to the new
// primary; a client whose slot map still names the old one gets MOVED, and
// must follow it too. Hooks on the client's nodes count the redirections
// its commands met (those of the commands queued in a MULTI are answered by
// the transaction as a whole); the old primary counts every one it answered
// (INFO errorstats). The slot is moved back at the end.
func TestCommandsFollowAskAndMoved(t *testing.T) {
	testenv.SkipWithoutRedisCluster(t)
	ctx := t.Context()
	_, prefix, _ := testenv.NewUniversalRedis(t) // a prefix whose keys are deleted at the end
	// The slot map is reloaded only when a redirection says so, so that
	// the MOVED below is met, not avoided by a timely reload.
	met := &redirections{}
	rdb := testenv.NewStaleClusterClient(t, met)

	q := queue.New(rdb, prefix+"tickets", group)
	require.NoError(t, q.EnsureGroup(ctx))
	key := q.Key(0)
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	owner, err := rdb.MasterForKey(ctx, key)
	require.NoError(t, err)
	m := testenv.NewSlotMove(t, int(slot), owner.Options().Addr)
	src, dst := m.From, m.To

	publish(t, q, makeEvents(1, 2))
	asked := errorCount(t, src, "ASK")

	// Half a move: the stream is on dst, the slot still src's.
	m.Begin()
	n, err := asking(ctx, dst, func(p redis.Pipeliner) *redis.IntCmd { return p.Exists(ctx, key) }).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n, "the stream is on %s now", dst.Options().Addr)
	met.reset()
	publish(t, q, makeEvents(3, 2))
	got := read(t, q, "a", 10)
	require.Equal(t, []int64{1, 2, 3, 4}, ticketIDs(got), "every ticket, those published before the move and during it")
	require.NoError(t, q.Touch(ctx, "a", got[0].MessageID))
	ids := make([]string, len(got))
	for i, tk := range got {
		ids[i] = tk.MessageID
	}
	held, err := q.Holds(ctx, ids)
	require.NoError(t, err)
	require.Equal(t, []bool{true, true, true, true}, held)
	for _, tk := range got {
		require.NoError(t, q.Ack(ctx, tk.MessageID))
	}
	left, err := asking(ctx, dst, func(p redis.Pipeliner) *redis.IntCmd { return p.XLen(ctx, key) }).Result()
	require.NoError(t, err)
	require.Zero(t, left, "every ticket acknowledged and deleted, on %s", dst.Options().Addr)
	require.Positive(t, met.count("ASK"), "the queue's commands met no ASK")
	require.Positive(t, errorCount(t, src, "ASK")-asked, "%s answered no ASK", src.Options().Addr)
	t.Logf("with slot %d moving from %s to %s, the queue's commands met %d ASK (%s answered %d), and followed them",
		slot, src.Options().Addr, dst.Options().Addr, met.count("ASK"), src.Options().Addr, errorCount(t, src, "ASK")-asked)

	// The move finished: the slot is dst's, and the client's map, reloaded
	// after the last ASK (a reload waits 200 ms before the next), is stale.
	time.Sleep(500 * time.Millisecond)
	m.Finish()
	met.reset()
	publish(t, q, makeEvents(5, 1))
	got = read(t, q, "a", 10)
	require.Equal(t, []int64{5}, ticketIDs(got))
	require.NoError(t, q.Ack(ctx, got[0].MessageID))
	pending, err := q.Pending(ctx)
	require.NoError(t, err)
	require.Zero(t, pending)
	require.Positive(t, met.count("MOVED"), "the queue's commands met no MOVED")
	t.Logf("with slot %d moved, the queue's commands met %d MOVED, and followed them", slot, met.count("MOVED"))
}

// redirections is a hook that counts the MOVED and ASK answers its client's
// commands met (each is then sent on by the cluster client).
type redirections struct {
	mu   sync.Mutex
	seen map[string]int
}

func (r *redirections) note(errs ...error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, err := range errs {
		if err == nil {
			continue
		}
		if kind, _, _ := strings.Cut(err.Error(), " "); kind == "MOVED" || kind == "ASK" {
			if r.seen == nil {
				r.seen = map[string]int{}
			}
			r.seen[kind]++
		}
	}
}

func (r *redirections) count(kind string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seen[kind]
}

func (r *redirections) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = nil
}

func (r *redirections) DialHook(next redis.DialHook) redis.DialHook { return next }

func (r *redirections) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		err := next(ctx, cmd) // the command's error, set on cmd only after the hooks
		r.note(err)
		return err
	}
}

func (r *redirections) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		err := next(ctx, cmds)
		for _, cmd := range cmds {
			r.note(cmd.Err())
		}
		return err
	}
}

// asking sends cmd to node after ASKING, in one pipeline (one connection),
// so that an importing node answers for a key of the slot it imports.
func asking[C redis.Cmder](ctx context.Context, node *redis.Client, cmd func(p redis.Pipeliner) C) C {
	var c C
	_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Do(ctx, "ASKING")
		c = cmd(p)
		return nil
	})
	return c
}

// errorCount returns how many errors of a kind (MOVED, ASK) node answered.
func errorCount(t *testing.T, node *redis.Client, kind string) int {
	t.Helper()
	info, err := node.Info(t.Context(), "errorstats").Result()
	require.NoError(t, err)
	for _, line := range strings.Split(info, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "errorstat_"+kind+":count="); ok {
			n, err := strconv.Atoi(rest)
			require.NoError(t, err, line)
			return n
		}
	}
	return 0
}
