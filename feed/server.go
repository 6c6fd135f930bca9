package feed

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/redis/go-redis/v9"
)

// Setting is a Redis server setting that what a reader costs in Redis
// depends on. Feeds and timelines are strings (see encoding.go), the same
// size on any server; what a server setting can make expensive is the
// reader's following hash, which Redis keeps as a listpack (~7 bytes a
// followee) only up to hash-max-listpack-entries fields, and as a hash table
// (~60 bytes a followee) above.
type Setting struct {
	Name string
	// Want is the least value that stores the feeds' data compactly.
	Want int
	// Why says what a smaller value costs.
	Why string
}

// ServerSettings are the settings CheckServer looks at. A listpack is
// searched from one end, so a lookup in a hash of 1,024 fields takes ~7 µs
// instead of ~0.2: the push script asks the following hash only for feeds
// whose reader was rebuilt or unfollowed someone since the fan-out read its
// followers, and follows and unfollows are rare, so the memory is worth it.
var ServerSettings = []Setting{{
	Name: "hash-max-listpack-entries",
	Want: 1024,
	Why:  "the following hash of a reader who follows more accounts than this is a hash table, ~60 bytes a followee instead of ~7",
}}

// ServerCheck is what CheckServer found of one setting on one Redis node.
type ServerCheck struct {
	Addr    string
	Setting Setting
	// Have is the node's value before any change.
	Have int
	// Applied: the check set it to Setting.Want (redis.configure).
	Applied bool
	// Err: the node would not say or would not change it (CONFIG may be
	// renamed or refused on a managed Redis).
	Err error
}

// Expensive tells whether the node stores the data the expensive way now.
func (c ServerCheck) Expensive() bool { return c.Err == nil && !c.Applied && c.Have < c.Setting.Want }

// CheckServer reads ServerSettings on every node of rdb (each primary and
// replica of a cluster: a replica promoted keeps its own settings) with
// CONFIG GET and, when apply is set, raises those below what they should be
// with CONFIG SET. It returns an error only when no node answered.
func CheckServer(ctx context.Context, rdb redis.UniversalClient, apply bool) ([]ServerCheck, error) {
	var (
		mu     sync.Mutex
		checks []ServerCheck
	)
	check := func(ctx context.Context, node *redis.Client) error {
		addr := node.Options().Addr
		for _, s := range ServerSettings {
			c := ServerCheck{Addr: addr, Setting: s}
			c.Have, c.Err = configInt(ctx, node, s.Name)
			if c.Err == nil && apply && c.Have < s.Want {
				if c.Err = node.ConfigSet(ctx, s.Name, strconv.Itoa(s.Want)).Err(); c.Err == nil {
					c.Applied = true
				}
			}
			mu.Lock()
			checks = append(checks, c)
			mu.Unlock()
		}
		return nil
	}
	var err error
	switch r := rdb.(type) {
	case *redis.ClusterClient:
		err = r.ForEachShard(ctx, check)
	case *redis.Client:
		err = check(ctx, r)
	default:
		return nil, fmt.Errorf("check Redis settings: a client of type %T", rdb)
	}
	if err != nil {
		return checks, fmt.Errorf("check Redis settings: %w", err)
	}
	for _, c := range checks {
		if c.Err == nil || !isUnreachable(c.Err) {
			return checks, nil
		}
	}
	if len(checks) > 0 {
		return checks, fmt.Errorf("check Redis settings: %w", checks[0].Err)
	}
	return checks, nil
}

func configInt(ctx context.Context, node *redis.Client, name string) (int, error) {
	values, err := node.ConfigGet(ctx, name).Result()
	if err != nil {
		return 0, err
	}
	v, ok := values[name]
	if !ok {
		return 0, fmt.Errorf("CONFIG GET %s: not a setting of this server", name)
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("CONFIG GET %s: %q is not a number", name, v)
	}
	return n, nil
}
