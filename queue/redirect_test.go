package queue_test

import (
	"context"
	"net"
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
	opts, err := redis.ParseClusterURL(testenv.RedisClusterURL())
	require.NoError(t, err)
	// The slot map is reloaded only when a redirection says so, so that
	// the MOVED below is met, not avoided by a timely reload.
	opts.ClusterStateReloadInterval = time.Hour
	met := &redirections{}
	opts.NewClient = func(o *redis.Options) *redis.Client {
		node := redis.NewClient(o)
		node.AddHook(met)
		return node
	}
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })

	q := queue.New(rdb, prefix+"tickets", group)
	require.NoError(t, q.EnsureGroup(ctx))
	key := q.Key(0)
	slot, err := rdb.ClusterKeySlot(ctx, key).Result()
	require.NoError(t, err)
	owner, err := rdb.MasterForKey(ctx, key)
	require.NoError(t, err)
	var addrs []string
	require.NoError(t, rdb.ForEachMaster(ctx, func(ctx context.Context, m *redis.Client) error {
		addrs = append(addrs, m.Options().Addr)
		return nil
	}))
	src := adminNode(t, owner.Options().Addr)
	var dst *redis.Client
	var others []*redis.Client
	for _, a := range addrs {
		switch {
		case a == src.Options().Addr:
		case dst == nil:
			dst = adminNode(t, a)
		default:
			others = append(others, adminNode(t, a))
		}
	}
	require.NotNil(t, dst, "a second primary")
	m := slotMove{t: t, slot: int(slot), from: src, to: dst, others: others}
	t.Cleanup(m.undo)

	publish(t, q, makeEvents(1, 2))
	asked := errorCount(t, src, "ASK")

	// Half a move: the stream is on dst, the slot still src's.
	m.begin()
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
	m.finish()
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

// adminNode is a plain client of one node of the cluster, for the commands
// that move a slot.
func adminNode(t *testing.T, addr string) *redis.Client {
	t.Helper()
	node := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = node.Close() })
	return node
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

// slotMove moves one slot from one primary to another as redis-cli does:
// IMPORTING on the target, MIGRATING on the source, MIGRATE of its keys,
// then the slot given to the target (the target first, then the others).
type slotMove struct {
	t        *testing.T
	slot     int
	from, to *redis.Client
	others   []*redis.Client
}

func (m slotMove) begin() {
	m.t.Helper()
	require.NoError(m.t, m.setSlot(m.to, "IMPORTING", m.from))
	require.NoError(m.t, m.setSlot(m.from, "MIGRATING", m.to))
	require.NoError(m.t, m.migrateKeys())
}

func (m slotMove) finish() {
	m.t.Helper()
	for _, node := range append([]*redis.Client{m.to, m.from}, m.others...) {
		require.NoError(m.t, m.setSlot(node, "NODE", m.to))
	}
}

// undo gives the slot back to its first owner, with its keys, from
// whatever state the test left it in.
func (m slotMove) undo() {
	ctx := context.Background()
	// Finish the move to m.to where it was begun (each step may have been
	// done already: their errors say so), then move it back.
	_ = m.setSlot(m.to, "IMPORTING", m.from)
	_ = m.setSlot(m.from, "MIGRATING", m.to)
	back := slotMove{t: m.t, slot: m.slot, from: m.to, to: m.from, others: m.others}
	err := m.migrateKeys()
	for _, node := range append([]*redis.Client{m.to, m.from}, m.others...) {
		if err == nil {
			err = m.setSlot(node, "NODE", m.to)
		}
	}
	if err == nil {
		err = back.setSlot(back.to, "IMPORTING", back.from)
	}
	if err == nil {
		err = back.setSlot(back.from, "MIGRATING", back.to)
	}
	if err == nil {
		err = back.migrateKeys()
	}
	for _, node := range append([]*redis.Client{back.to, back.from}, back.others...) {
		if err == nil {
			err = back.setSlot(node, "NODE", back.to)
		}
	}
	if err != nil {
		m.t.Errorf("give slot %d back to %s: %v (redis-cli --cluster fix 127.0.0.1:7000 repairs it)", m.slot, m.from.Options().Addr, err)
		return
	}
	// Until every node says so, other clients may be sent back and forth.
	deadline := time.Now().Add(10 * time.Second)
	for _, node := range append([]*redis.Client{m.from, m.to}, m.others...) {
		for time.Now().Before(deadline) {
			owner, err := slotOwner(ctx, node, m.slot)
			if err == nil && owner == m.from.Options().Addr {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (m slotMove) setSlot(node *redis.Client, state string, other *redis.Client) error {
	id, err := other.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	return node.Do(context.Background(), "CLUSTER", "SETSLOT", m.slot, state, id).Err()
}

// migrateKeys moves every key of the slot from m.from to m.to.
func (m slotMove) migrateKeys() error {
	ctx := context.Background()
	host, port, err := net.SplitHostPort(m.to.Options().Addr)
	if err != nil {
		return err
	}
	for {
		keys, err := m.from.ClusterGetKeysInSlot(ctx, m.slot, 100).Result()
		if err != nil || len(keys) == 0 {
			return err
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.from.Do(ctx, args...).Err(); err != nil {
			return err
		}
	}
}

// slotOwner returns the address of the primary that node says owns slot.
func slotOwner(ctx context.Context, node *redis.Client, slot int) (string, error) {
	shards, err := node.ClusterShards(ctx).Result()
	if err != nil {
		return "", err
	}
	for _, sh := range shards {
		for _, r := range sh.Slots {
			if int(r.Start) > slot || slot > int(r.End) {
				continue
			}
			for _, n := range sh.Nodes {
				if n.Role == "master" {
					return net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10)), nil
				}
			}
		}
	}
	return "", nil
}
