package testenv

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// SlotMove moves one slot of the test cluster from its primary to another,
// as `redis-cli --cluster reshard` moves each: IMPORTING on the target,
// MIGRATING on the source, MIGRATE of its keys (Begin), then the slot given
// to the target, the target first, then the others (Finish). The test's
// cleanup gives it back, with its keys, from whatever state the test left
// it in.
type SlotMove struct {
	t        testing.TB
	slot     int
	From, To *redis.Client // plain clients of the two primaries
	others   []*redis.Client
}

// NewSlotMove prepares to move slot from owner (its primary's address) to
// another primary of the cluster.
func NewSlotMove(t testing.TB, slot int, owner string) *SlotMove {
	t.Helper()
	m := &SlotMove{t: t, slot: slot, From: adminNode(t, owner)}
	shards, err := m.From.ClusterShards(context.Background()).Result()
	require.NoError(t, err)
	for _, sh := range shards {
		for _, n := range sh.Nodes {
			addr := net.JoinHostPort(n.IP, strconv.FormatInt(n.Port, 10))
			switch {
			case n.Role != "master" || len(sh.Slots) == 0 || addr == owner:
			case m.To == nil:
				m.To = adminNode(t, addr)
			default:
				m.others = append(m.others, adminNode(t, addr))
			}
		}
	}
	require.NotNil(t, m.To, "a second primary")
	t.Cleanup(m.undo)
	return m
}

// adminNode is a plain client of one node of the cluster, for the commands
// that move a slot.
func adminNode(t testing.TB, addr string) *redis.Client {
	node := redis.NewClient(&redis.Options{Addr: addr})
	t.Cleanup(func() { _ = node.Close() })
	return node
}

// Begin is half a move: the slot's keys are on To, the slot still From's,
// which answers for a key it no longer has with ASK.
func (m *SlotMove) Begin() {
	m.t.Helper()
	require.NoError(m.t, m.setSlot(m.To, "IMPORTING", m.From))
	require.NoError(m.t, m.setSlot(m.From, "MIGRATING", m.To))
	require.NoError(m.t, m.migrateKeys())
}

// Finish gives the slot to To: a client whose slot map still names From
// gets MOVED.
func (m *SlotMove) Finish() {
	m.t.Helper()
	for _, node := range append([]*redis.Client{m.To, m.From}, m.others...) {
		require.NoError(m.t, m.setSlot(node, "NODE", m.To))
	}
}

// undo gives the slot back to its first owner, with its keys, from
// whatever state the test left it in.
func (m *SlotMove) undo() {
	ctx := context.Background()
	// Finish the move to m.To where it was begun (each step may have been
	// done already: their errors say so), then move it back.
	_ = m.setSlot(m.To, "IMPORTING", m.From)
	_ = m.setSlot(m.From, "MIGRATING", m.To)
	back := &SlotMove{t: m.t, slot: m.slot, From: m.To, To: m.From, others: m.others}
	err := m.migrateKeys()
	for _, node := range append([]*redis.Client{m.To, m.From}, m.others...) {
		if err == nil {
			err = m.setSlot(node, "NODE", m.To)
		}
	}
	if err == nil {
		err = back.setSlot(back.To, "IMPORTING", back.From)
	}
	if err == nil {
		err = back.setSlot(back.From, "MIGRATING", back.To)
	}
	if err == nil {
		err = back.migrateKeys()
	}
	for _, node := range append([]*redis.Client{back.To, back.From}, back.others...) {
		if err == nil {
			err = back.setSlot(node, "NODE", back.To)
		}
	}
	if err != nil {
		m.t.Errorf("give slot %d back to %s: %v (redis-cli --cluster fix 127.0.0.1:7000 repairs it)", m.slot, m.From.Options().Addr, err)
		return
	}
	// Until every node says so, other clients may be sent back and forth.
	deadline := time.Now().Add(10 * time.Second)
	for _, node := range append([]*redis.Client{m.From, m.To}, m.others...) {
		for time.Now().Before(deadline) {
			owner, err := slotOwner(ctx, node, m.slot)
			if err == nil && owner == m.From.Options().Addr {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

func (m *SlotMove) setSlot(node *redis.Client, state string, other *redis.Client) error {
	id, err := other.Do(context.Background(), "CLUSTER", "MYID").Text()
	if err != nil {
		return err
	}
	return node.Do(context.Background(), "CLUSTER", "SETSLOT", m.slot, state, id).Err()
}

// migrateKeys moves every key of the slot from m.From to m.To.
func (m *SlotMove) migrateKeys() error {
	ctx := context.Background()
	host, port, err := net.SplitHostPort(m.To.Options().Addr)
	if err != nil {
		return err
	}
	for {
		keys, err := m.From.ClusterGetKeysInSlot(ctx, m.slot, 100).Result()
		if err != nil || len(keys) == 0 {
			return err
		}
		args := []any{"MIGRATE", host, port, "", 0, 5000, "KEYS"}
		for _, k := range keys {
			args = append(args, k)
		}
		if err := m.From.Do(ctx, args...).Err(); err != nil {
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

// NewStaleClusterClient is a client of the test cluster whose slot map is
// reloaded only when a redirection says so — a test that moves a slot
// meets the MOVED, not a timely reload — with hook on each node's client.
func NewStaleClusterClient(t testing.TB, hook redis.Hook) *redis.ClusterClient {
	t.Helper()
	opts, err := redis.ParseClusterURL(RedisClusterURL())
	require.NoError(t, err)
	opts.ClusterStateReloadInterval = time.Hour
	opts.NewClient = func(o *redis.Options) *redis.Client {
		node := redis.NewClient(o)
		node.AddHook(hook)
		return node
	}
	rdb := redis.NewClusterClient(opts)
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb
}
