package live

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/health"
)

// Publisher tells the hubs what changed in the feeds of the readers they
// hold streams for. It is best effort by design: a message that does not
// arrive is found again by the stream's next read of the feed, so nothing
// it fails to send fails the fan-out. Run keeps its copy of the presence.
type Publisher struct {
	rdb     redis.UniversalClient
	keys    keys
	log     *zap.Logger
	outages health.Explainer

	mu        sync.RWMutex
	users     map[int64][]string // user → the hubs that hold a stream of theirs
	instances []string           // every hub that is up
	changes   uint64             // announced changes applied, so that a reload knows it raced one

	sent, failed prometheus.Counter
}

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Prefix is redis.prefix.
	Prefix string
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Outages, like the hub's, explains the presence channel's
	// subscription failing during a logged outage. nil: nothing is.
	Outages health.Explainer
	// Registerer receives the publisher's counters. Defaults to none.
	Registerer prometheus.Registerer
}

// NewPublisher builds a Publisher; nothing is sent until Run has learnt who
// is connected.
func NewPublisher(rdb redis.UniversalClient, cfg PublisherConfig) *Publisher {
	if cfg.Logger == nil {
		cfg.Logger = zap.NewNop()
	}
	p := &Publisher{
		rdb: rdb, keys: keys{cfg.Prefix}, log: cfg.Logger, outages: cfg.Outages,
		sent: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_live_messages_total",
			Help: "Messages sent to the processes that hold live streams (one per process and page of followers).",
		}),
		failed: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "newsfeed_live_message_errors_total",
			Help: "Messages to live streams that Redis did not take; the streams find what they missed in the feed.",
		}),
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(p.sent, p.failed)
	}
	return p
}

// Run keeps the presence up to date until ctx ends: the changes hubs
// announce as they happen, and the whole of it every few seconds (and after
// each interruption of the announcements), which also forgets hubs that
// died. It returns nil when ctx ends, once the goroutine it started has
// ended.
func (p *Publisher) Run(ctx context.Context) error {
	wait := goListen(ctx, p.rdb, p.keys.presence(), p.log, p.outages, func(bool) { p.reload(ctx) }, p.apply)
	defer wait()
	t := time.NewTicker(reloadEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			p.reload(ctx)
		}
	}
}

// reload reads every hub's users. Changes announced while it reads would
// be overwritten by what it read before them: it reads again then.
func (p *Publisher) reload(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	for range 3 {
		p.mu.RLock()
		before := p.changes
		p.mu.RUnlock()
		users, instances, err := p.read(ctx)
		if err != nil {
			p.log.Debug("cannot read who is connected", zap.Error(err))
			return
		}
		p.mu.Lock()
		if p.changes == before {
			p.users, p.instances = users, instances
			p.mu.Unlock()
			return
		}
		p.mu.Unlock()
	}
}

// read reads the hubs that are up and the users of each.
func (p *Publisher) read(ctx context.Context) (map[int64][]string, []string, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	instances, err := p.rdb.ZRangeByScore(ctx, p.keys.instances(), &redis.ZRangeBy{Min: "(" + now, Max: "+inf"}).Result()
	if err != nil {
		return nil, nil, err
	}
	cmds := make([]*redis.MapStringStringCmd, len(instances))
	_, err = p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for i, inst := range instances {
			cmds[i] = pl.HGetAll(ctx, p.keys.users(inst))
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	users := make(map[int64][]string)
	for i, c := range cmds {
		for field, n := range c.Val() {
			id, err := strconv.ParseInt(field, 10, 64)
			if count, _ := strconv.Atoi(n); err == nil && count > 0 {
				users[id] = append(users[id], instances[i])
			}
		}
	}
	return users, instances, nil
}

// apply takes one announced change of the presence.
func (p *Publisher) apply(payload string) {
	var c presenceChange
	if json.Unmarshal([]byte(payload), &c) != nil || c.Instance == "" {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.changes++
	if c.Gone {
		p.instances = without(p.instances, c.Instance)
		for u, insts := range p.users {
			if insts = without(insts, c.Instance); len(insts) == 0 {
				delete(p.users, u)
			} else {
				p.users[u] = insts
			}
		}
		return
	}
	if p.users == nil {
		p.users = make(map[int64][]string)
	}
	insts := without(p.users[c.User], c.Instance)
	if c.N > 0 {
		insts = append(insts, c.Instance)
		if !slices.Contains(p.instances, c.Instance) {
			p.instances = append(p.instances, c.Instance)
		}
	}
	if len(insts) == 0 {
		delete(p.users, c.User)
	} else {
		p.users[c.User] = insts
	}
}

// Pushed tells the hubs that post by author is in the feeds of followers
// (a page the fan-out just wrote). Followers without a stream cost a map
// look-up; with nobody connected anywhere, nothing at all.
func (p *Publisher) Pushed(ctx context.Context, postID, authorID int64, followers []int64) {
	p.toReaders(ctx, message{Kind: kindPost, Post: postID, Author: authorID}, followers)
}

// Unsure tells the hubs that the feeds of readers are not in Redis (a
// fan-out found them missing): their streams read them again, which
// rebuilds them, and send what they hold.
func (p *Publisher) Unsure(ctx context.Context, readers []int64) {
	p.toReaders(ctx, message{Kind: kindUnsure}, readers)
}

// Removed tells the hubs that post left the feeds of readers.
func (p *Publisher) Removed(ctx context.Context, postID int64, readers []int64) {
	p.toReaders(ctx, message{Kind: kindRemove, Post: postID}, readers)
}

// Pulled tells every hub of a celebrity's new post: it is in no feed, and
// each hub knows which of its readers follow the author.
func (p *Publisher) Pulled(ctx context.Context, postID, authorID int64) {
	p.toEveryHub(ctx, message{Kind: kindPulled, Post: postID, Author: authorID})
}

// Unpulled tells every hub that a celebrity's post was deleted.
func (p *Publisher) Unpulled(ctx context.Context, postID, authorID int64) {
	p.toEveryHub(ctx, message{Kind: kindUnpulled, Post: postID, Author: authorID})
}

// Unfollowed tells the follower's streams that followee's posts left their feed.
func (p *Publisher) Unfollowed(ctx context.Context, follower, followee int64) {
	p.toReaders(ctx, message{Kind: kindUnfollow, Author: followee}, []int64{follower})
}

// Followed tells the follower's streams that they follow followee now.
func (p *Publisher) Followed(ctx context.Context, follower, followee int64) {
	p.toReaders(ctx, message{Kind: kindFollow, Author: followee}, []int64{follower})
}

// Hid tells the readers' streams that what their feeds hide changed (a
// mute, a block, or their undoing).
func (p *Publisher) Hid(ctx context.Context, readers []int64) {
	p.toReaders(ctx, message{Kind: kindHid}, readers)
}

// toReaders sends m to each hub with a stream of one of readers, naming
// those it holds.
func (p *Publisher) toReaders(ctx context.Context, m message, readers []int64) {
	p.mu.RLock()
	if len(p.users) == 0 {
		p.mu.RUnlock()
		return
	}
	var byHub map[string][]int64
	for _, r := range readers {
		for _, inst := range p.users[r] {
			if byHub == nil {
				byHub = make(map[string][]int64)
			}
			byHub[inst] = append(byHub[inst], r)
		}
	}
	p.mu.RUnlock()
	if len(byHub) == 0 {
		return
	}
	out := make(map[string]message, len(byHub))
	for inst, users := range byHub {
		m := m
		m.Users = users
		out[inst] = m
	}
	p.send(ctx, out)
}

func (p *Publisher) toEveryHub(ctx context.Context, m message) {
	p.mu.RLock()
	if len(p.users) == 0 { // nobody connected anywhere
		p.mu.RUnlock()
		return
	}
	out := make(map[string]message, len(p.instances))
	for _, inst := range p.instances {
		out[inst] = m
	}
	p.mu.RUnlock()
	p.send(ctx, out)
}

// send publishes each hub's message, in one pipeline.
func (p *Publisher) send(ctx context.Context, out map[string]message) {
	if len(out) == 0 {
		return
	}
	cmds := make([]*redis.IntCmd, 0, len(out))
	at := time.Now().UnixMilli()
	_, err := p.rdb.Pipelined(ctx, func(pl redis.Pipeliner) error {
		for inst, m := range out {
			m.At = at
			b, err := json.Marshal(m)
			if err != nil {
				return err
			}
			cmds = append(cmds, pl.SPublish(ctx, p.keys.inbox(inst), b))
		}
		return nil
	})
	failed := 0
	for _, c := range cmds {
		if c.Err() != nil {
			failed++
		}
	}
	p.sent.Add(float64(len(cmds) - failed))
	if failed > 0 || err != nil {
		p.failed.Add(float64(max(failed, 1)))
		p.log.Debug("cannot reach live streams; they will read the feed", zap.Error(err))
	}
}

func without(list []string, s string) []string {
	out := list[:0:0]
	for _, v := range list {
		if v != s {
			out = append(out, v)
		}
	}
	return out
}
