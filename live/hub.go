package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/defaults"
	"github.com/newsfeed/newsfeed/internal/health"
)

// The defaults of HubConfig.
const (
	// DefaultMaxPerUser is streams one user may hold open, in every process
	// together (stream.max_per_user).
	DefaultMaxPerUser = 5
	// DefaultMaxConnections is streams one process holds (stream.max_connections).
	DefaultMaxConnections = 10000
	// DefaultBuffer is events a stream may fall behind before it is dropped.
	DefaultBuffer = 256
)

// Posts hydrates post ids (the feed's post cache, PostgreSQL behind it).
type Posts interface {
	// Posts returns the live posts among ids, in their order.
	Posts(ctx context.Context, ids []int64) ([]domain.Post, error)
}

// Follows tells whether readers follow, or hide, an author now.
type Follows interface {
	// Following reports, for each reader, whether they follow author: 1
	// yes, 0 no, -1 not known here (their feed is not in Redis).
	Following(ctx context.Context, readers []int64, author int64) ([]int, error)
	// Hiding reports, for each reader, whether their feed hides author (a
	// mute or a block): 1 yes, 0 no, -1 not known here.
	Hiding(ctx context.Context, readers []int64, author int64) ([]int, error)
}

// HubConfig configures a Hub. A zero field takes its default; a negative
// one makes NewHub return an error naming the field.
type HubConfig struct {
	// Prefix is redis.prefix.
	Prefix string
	// MaxPerUser is streams one user may have open in every process
	// together; more are refused with domain.ErrTooManyStreams. Defaults to
	// DefaultMaxPerUser (5).
	MaxPerUser int
	// MaxConnections is streams this process holds; more are refused with
	// domain.ErrStreamsFull. Defaults to DefaultMaxConnections (10,000).
	MaxConnections int
	// Buffer is events a stream may fall behind (its client does not read)
	// before the hub drops it. Defaults to DefaultBuffer (256).
	Buffer int
	// Posts and Follows are the feeds'. Required.
	Posts   Posts
	Follows Follows
	// Logger defaults to a no-op logger.
	Logger *zap.Logger
	// Outages tells whether a dependency outage, logged once by whoever
	// watches the dependencies (health.Watch), explains the inbox's
	// subscription failing: then it logs at debug. nil: nothing is
	// explained.
	Outages health.Explainer
	// Registerer receives the hub's metrics. Defaults to none.
	Registerer prometheus.Registerer
}

// validate refuses the values out of range, naming each field, and fills
// the zero ones with their defaults.
func (c *HubConfig) validate() error {
	const config = "live.HubConfig"
	if err := errors.Join(
		defaults.NotNegative(config, "MaxPerUser", c.MaxPerUser, defaults.The(DefaultMaxPerUser)),
		defaults.NotNegative(config, "MaxConnections", c.MaxConnections, defaults.The(DefaultMaxConnections)),
		defaults.NotNegative(config, "Buffer", c.Buffer, defaults.The(DefaultBuffer)),
	); err != nil {
		return err
	}
	if c.Posts == nil || c.Follows == nil {
		return errors.New("live: HubConfig.Posts and HubConfig.Follows are required")
	}
	defaults.Fill(&c.MaxPerUser, DefaultMaxPerUser)
	defaults.Fill(&c.MaxConnections, DefaultMaxConnections)
	defaults.Fill(&c.Buffer, DefaultBuffer)
	if c.Logger == nil {
		c.Logger = zap.NewNop()
	}
	return nil
}

// Hub holds the streams open in this process and brings each its events.
type Hub struct {
	rdb      redis.UniversalClient
	keys     keys
	cfg      HubConfig
	instance string
	log      *zap.Logger

	mu   sync.Mutex
	subs map[int64]map[*subscription]struct{} // by user
	// announcing orders the presence announcements (announce).
	announcing sync.Mutex
	count      int
	down       bool // Run ended: no new streams

	open    prometheus.Gauge
	dropped *prometheus.CounterVec
	events  *prometheus.CounterVec
}

// NewHub builds a hub; Run makes it reachable.
func NewHub(rdb redis.UniversalClient, cfg HubConfig) (*Hub, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	h := &Hub{
		rdb: rdb, keys: keys{cfg.Prefix}, cfg: cfg, instance: newID(), log: cfg.Logger,
		subs: make(map[int64]map[*subscription]struct{}),
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "newsfeed_stream_connections",
			Help: "Live feed streams (GET /v1/feed/stream) open in this process.",
		}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_stream_dropped_total",
			Help: "Live feed streams ended by the server, by reason: slow (the client did not read), stopping.",
		}, []string{"reason"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "newsfeed_stream_events_total",
			Help: "Events handed to live feed streams, by kind: post, remove, unfollow, catch_up.",
		}, []string{"kind"}),
	}
	for _, reason := range []string{"slow", "stopping"} {
		h.dropped.WithLabelValues(reason) // exported at 0 from the start
	}
	for _, k := range []domain.LiveKind{domain.LivePost, domain.LiveRemove, domain.LiveUnfollowed, domain.LiveFollowed, domain.LiveCatchUp, domain.LiveResync} {
		h.events.WithLabelValues(kindLabel(k))
	}
	if cfg.Registerer != nil {
		cfg.Registerer.MustRegister(h.open, h.dropped, h.events)
	}
	return h, nil
}

// Run registers the hub, listens on its inbox and renews its presence until
// ctx ends; then it ends every stream and forgets the hub in Redis. It
// returns nil when ctx ends, once the goroutine it started has ended.
func (h *Hub) Run(ctx context.Context) error {
	h.mu.Lock()
	h.down = false
	h.mu.Unlock()
	wait := goListen(ctx, h.rdb, h.keys.inbox(h.instance), h.log, h.cfg.Outages, func(bool) {
		// What came before (streams opened before the first subscription
		// too) is lost: every stream reads its feed.
		h.everyone(domain.LiveEvent{Kind: domain.LiveCatchUp})
	}, func(payload string) { h.handle(ctx, payload) })
	defer wait()
	h.renew(ctx)
	t := time.NewTicker(leaseRenew)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			h.stop()
			return nil
		case <-t.C:
			h.renew(ctx)
		}
	}
}

// renew writes the hub's presence anew — its lease, every user it holds
// streams for, each stream's lease — so that what a Redis restart lost comes
// back within leaseRenew.
func (h *Hub) renew(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	until := time.Now().Add(lease).UnixMilli()
	// Under announcing: a stream closed after the snapshot below announces
	// after this write, not before it (the write would bring it back).
	h.announcing.Lock()
	defer h.announcing.Unlock()
	h.mu.Lock()
	users := make(map[int64][]string, len(h.subs))
	for u, subs := range h.subs {
		for s := range subs {
			users[u] = append(users[u], s.member)
		}
	}
	h.mu.Unlock()
	usersKey := h.keys.users(h.instance)
	// The users hash is replaced in one transaction (one key, one slot): a
	// publisher reading it meanwhile sees the old or the new, never none.
	_, err := h.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, usersKey)
		if len(users) > 0 {
			fields := make([]any, 0, 2*len(users))
			for u, members := range users {
				fields = append(fields, strconv.FormatInt(u, 10), len(members))
			}
			p.HSet(ctx, usersKey, fields...)
			p.PExpire(ctx, usersKey, lease)
		}
		return nil
	})
	if err != nil {
		h.log.Debug("cannot renew the live presence", zap.Error(err))
	}
	_, err = h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZAdd(ctx, h.keys.instances(), redis.Z{Score: float64(until), Member: h.instance})
		p.ZRemRangeByScore(ctx, h.keys.instances(), "-inf", strconv.FormatInt(time.Now().UnixMilli(), 10))
		for u, members := range users {
			for _, m := range members {
				p.ZAdd(ctx, h.keys.conns(u), redis.Z{Score: float64(until), Member: m})
			}
			p.PExpire(ctx, h.keys.conns(u), lease)
		}
		return nil
	})
	if err != nil {
		h.log.Debug("cannot renew the live presence", zap.Error(err))
	}
}

// stop ends every stream and removes the hub from Redis.
func (h *Hub) stop() {
	h.mu.Lock()
	h.down = true
	var all []*subscription
	for _, subs := range h.subs {
		for s := range subs {
			all = append(all, s)
		}
	}
	h.mu.Unlock()
	for _, s := range all {
		s.drop(h, "stopping")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	b, _ := json.Marshal(presenceChange{Instance: h.instance, Gone: true})
	_, _ = h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.ZRem(ctx, h.keys.instances(), h.instance)
		p.Del(ctx, h.keys.users(h.instance))
		p.SPublish(ctx, h.keys.presence(), b)
		return nil
	})
}

// admitScript takes a place among a user's streams: it forgets those whose
// lease ended, refuses beyond the limit (0: none), and records the new one.
var admitScript = redis.NewScript(`
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
local limit = tonumber(ARGV[3])
if limit > 0 and redis.call('ZCARD', KEYS[1]) >= limit then
  return 0
end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[4])
redis.call('PEXPIRE', KEYS[1], ARGV[5])
return 1
`)

// Subscribe opens a stream for userID: refused with domain.ErrStreamsFull
// when this process holds as many as it may, domain.ErrTooManyStreams when
// the user does, and an error wrapping domain.ErrUnavailable when Redis
// does not answer (a stream could not be live).
func (h *Hub) Subscribe(ctx context.Context, userID int64) (domain.LiveSubscription, error) {
	h.mu.Lock()
	if h.down || h.count >= h.cfg.MaxConnections {
		h.mu.Unlock()
		return nil, domain.ErrStreamsFull
	}
	h.count++ // held while Redis is asked, so that a burst cannot pass the limit
	h.mu.Unlock()
	s := &subscription{
		user: userID, opened: time.Now().UnixMilli(), member: h.instance + "/" + newID(),
		events: make(chan domain.LiveEvent, h.cfg.Buffer), gone: make(chan struct{}),
		follows: make(map[int64]bool),
	}
	now := time.Now()
	ok, err := admitScript.Run(ctx, h.rdb, []string{h.keys.conns(userID)},
		now.UnixMilli(), now.Add(lease).UnixMilli(), h.cfg.MaxPerUser, s.member, lease.Milliseconds()).Int()
	if err != nil || ok == 0 {
		h.mu.Lock()
		h.count--
		h.mu.Unlock()
		if err != nil {
			return nil, fmt.Errorf("open a live stream: %w: %w", domain.ErrUnavailable, err)
		}
		return nil, domain.ErrTooManyStreams
	}
	h.mu.Lock()
	if h.down { // stopped while Redis was asked: stop has ended every stream it knew
		h.count--
		h.mu.Unlock()
		rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_ = h.rdb.ZRem(rctx, h.keys.conns(userID), s.member).Err()
		cancel()
		return nil, domain.ErrStreamsFull
	}
	if h.subs[userID] == nil {
		h.subs[userID] = make(map[*subscription]struct{})
	}
	h.subs[userID][s] = struct{}{}
	h.mu.Unlock()
	h.open.Inc()
	s.close = func() { h.release(s) }
	// Before the stream reads its feed: a post pushed after that read finds
	// the user here (or the stream's next read finds the post).
	if err := h.announce(ctx, userID, ""); err != nil {
		s.Close()
		return nil, fmt.Errorf("open a live stream: %w: %w", domain.ErrUnavailable, err)
	}
	return s, nil
}

// announce records in Redis how many streams of user this hub holds now,
// and tells the publishers. One announcement at a time, each counting as it
// is sent: a stream closed and one opened at once would otherwise let the
// older count ("none") land last, and publishers forget the user.
// closed, if set, is a stream of user that just closed: its place among the
// user's streams is freed in the same turn (a renew cannot bring it back).
func (h *Hub) announce(ctx context.Context, user int64, closed string) error {
	h.announcing.Lock()
	defer h.announcing.Unlock()
	h.mu.Lock()
	n := len(h.subs[user])
	h.mu.Unlock()
	b, _ := json.Marshal(presenceChange{Instance: h.instance, User: user, N: n})
	usersKey := h.keys.users(h.instance)
	_, err := h.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		if closed != "" {
			p.ZRem(ctx, h.keys.conns(user), closed)
		}
		if n > 0 {
			p.HSet(ctx, usersKey, strconv.FormatInt(user, 10), n)
			p.PExpire(ctx, usersKey, lease)
		} else {
			p.HDel(ctx, usersKey, strconv.FormatInt(user, 10))
		}
		p.SPublish(ctx, h.keys.presence(), b)
		return nil
	})
	return err
}

// release frees a closed stream's place, here and in Redis.
func (h *Hub) release(s *subscription) {
	h.mu.Lock()
	subs := h.subs[s.user]
	if _, ok := subs[s]; !ok {
		h.mu.Unlock()
		return
	}
	delete(subs, s)
	if len(subs) == 0 {
		delete(h.subs, s.user)
	}
	h.count--
	h.mu.Unlock()
	h.open.Dec()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	// What fails here ends with the leases.
	_ = h.announce(ctx, s.user, s.member)
}

// handle takes one message of the inbox.
func (h *Hub) handle(ctx context.Context, payload string) {
	var m message
	if err := json.Unmarshal([]byte(payload), &m); err != nil {
		h.log.Warn("live message that does not parse", zap.Error(err))
		return
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	switch m.Kind {
	case kindPost:
		if subs := openedBefore(h.of(m.Users), m.At); len(subs) > 0 {
			h.sendPost(ctx, m.Post, subs)
		}
	case kindRemove:
		for _, s := range h.of(m.Users) {
			h.deliver(s, domain.LiveEvent{Kind: domain.LiveRemove, PostID: m.Post})
		}
	case kindUnsure:
		for _, s := range h.of(m.Users) {
			h.deliver(s, domain.LiveEvent{Kind: domain.LiveCatchUp})
		}
	case kindHid:
		for _, s := range h.of(m.Users) {
			h.mu.Lock()
			clear(s.follows) // asked again: a block removes follows too
			h.mu.Unlock()
			h.deliver(s, domain.LiveEvent{Kind: domain.LiveResync})
		}
	case kindPulled, kindUnpulled:
		yes := h.followers(ctx, m.Author)
		if m.Kind == kindPulled {
			h.sendPost(ctx, m.Post, openedBefore(yes, m.At))
			return
		}
		for _, s := range yes {
			h.deliver(s, domain.LiveEvent{Kind: domain.LiveRemove, PostID: m.Post})
		}
	case kindUnfollow, kindFollow:
		for _, s := range h.of(m.Users) {
			h.mu.Lock()
			delete(s.follows, m.Author) // asked again at the author's next pulled post
			h.mu.Unlock()
			kind := domain.LiveFollowed
			if m.Kind == kindUnfollow {
				kind = domain.LiveUnfollowed
			}
			h.deliver(s, domain.LiveEvent{Kind: kind, AuthorID: m.Author})
		}
	}
}

// sendPost hydrates a post once and hands it to subs.
func (h *Hub) sendPost(ctx context.Context, postID int64, subs []*subscription) {
	if len(subs) == 0 {
		return
	}
	posts, err := h.cfg.Posts.Posts(ctx, []int64{postID})
	if err != nil {
		// The streams' next read of their feeds brings it.
		h.log.Debug("cannot read a live post", zap.Int64("post_id", postID), zap.Error(err))
		for _, s := range subs {
			h.deliver(s, domain.LiveEvent{Kind: domain.LiveCatchUp})
		}
		return
	}
	if len(posts) == 0 {
		return // deleted already
	}
	hiding := h.hiding(ctx, posts[0], subs)
	for i, s := range subs {
		switch {
		case hiding == nil:
			h.deliver(s, domain.LiveEvent{Kind: domain.LivePost, Post: posts[0]})
		case hiding[i] < 0: // the feed is not in Redis: its read rebuilds it
			h.deliver(s, domain.LiveEvent{Kind: domain.LiveCatchUp})
		case hiding[i] == 0:
			h.deliver(s, domain.LiveEvent{Kind: domain.LivePost, Post: posts[0], HidesChecked: true})
		}
	}
}

// hiding asks, for every stream post goes to, whether its reader's feed
// hides the post's author, in one round trip (see LiveEvent.HidesChecked);
// nil when it cannot tell: a repost (its stream reads the feed, which knows
// whether it shows) or Redis failing (each stream asks then).
func (h *Hub) hiding(ctx context.Context, post domain.Post, subs []*subscription) []int {
	author, original, ok := post.Authors()
	if !ok || original != 0 {
		return nil
	}
	readers := make([]int64, len(subs))
	for i, s := range subs {
		readers[i] = s.user
	}
	hiding, err := h.cfg.Follows.Hiding(ctx, readers, author)
	if err != nil {
		h.log.Debug("cannot read whom readers hide", zap.Int64("post_id", post.ID), zap.Error(err))
		return nil
	}
	return hiding
}

// followers returns the streams whose readers follow author, asking Redis
// for those not known yet; a reader whose follows are not in Redis reads
// their feed instead (which rebuilds it).
func (h *Hub) followers(ctx context.Context, author int64) []*subscription {
	h.mu.Lock()
	var yes, ask []*subscription
	for _, subs := range h.subs {
		for s := range subs {
			if f, known := s.follows[author]; !known {
				ask = append(ask, s)
			} else if f {
				yes = append(yes, s)
			}
		}
	}
	h.mu.Unlock()
	if len(ask) == 0 {
		return yes
	}
	readers := make([]int64, len(ask))
	for i, s := range ask {
		readers[i] = s.user
	}
	states, err := h.cfg.Follows.Following(ctx, readers, author)
	if err != nil {
		h.log.Debug("cannot tell who follows an author", zap.Int64("author_id", author), zap.Error(err))
		states = nil
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for i, s := range ask {
		switch {
		case i < len(states) && states[i] >= 0:
			s.follows[author] = states[i] == 1
			if states[i] == 1 {
				yes = append(yes, s)
			}
		default:
			h.deliverLocked(s, domain.LiveEvent{Kind: domain.LiveCatchUp})
		}
	}
	return yes
}

// openedBefore keeps the streams opened before at (Unix milliseconds; 0:
// unknown, all): a post announced earlier was in the feed when a later
// stream started from it, and would be sent twice. (Clocks of different
// hosts may differ by a little; a post pushed in that moment and older than
// the stream's resume point is then shown by the next read of the feed.)
func openedBefore(subs []*subscription, at int64) []*subscription {
	if at == 0 {
		return subs
	}
	out := subs[:0]
	for _, s := range subs {
		if s.opened <= at {
			out = append(out, s)
		}
	}
	return out
}

// of returns the streams of users.
func (h *Hub) of(users []int64) []*subscription {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []*subscription
	for _, u := range users {
		for s := range h.subs[u] {
			out = append(out, s)
		}
	}
	return out
}

// everyone hands ev to every stream.
func (h *Hub) everyone(ev domain.LiveEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, subs := range h.subs {
		for s := range subs {
			h.deliverLocked(s, ev)
		}
	}
}

func (h *Hub) deliver(s *subscription, ev domain.LiveEvent) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.deliverLocked(s, ev)
}

// deliverLocked hands ev to s without waiting: a stream whose client does
// not read falls behind by Buffer events at most, then is dropped (its
// client reconnects and resumes from the feed), never buffered without bound.
func (h *Hub) deliverLocked(s *subscription, ev domain.LiveEvent) {
	select {
	case <-s.gone:
		return
	default:
	}
	select {
	case s.events <- ev:
		h.events.WithLabelValues(kindLabel(ev.Kind)).Inc()
	default:
		s.goneOnce.Do(func() {
			close(s.gone)
			h.dropped.WithLabelValues("slow").Inc()
		})
	}
}

func kindLabel(k domain.LiveKind) string {
	switch k {
	case domain.LivePost:
		return "post"
	case domain.LiveRemove:
		return "remove"
	case domain.LiveUnfollowed:
		return "unfollow"
	case domain.LiveFollowed:
		return "follow"
	case domain.LiveResync:
		return "resync"
	default:
		return "catch_up"
	}
}

// subscription is one open stream.
type subscription struct {
	user     int64
	opened   int64  // Unix milliseconds
	member   string // instance/stream, in the user's set of streams
	events   chan domain.LiveEvent
	gone     chan struct{}
	goneOnce sync.Once
	close    func()
	closed   sync.Once
	follows  map[int64]bool // celebrity → followed, as last asked (the hub's mu)
}

func (s *subscription) Events() <-chan domain.LiveEvent { return s.events }
func (s *subscription) Gone() <-chan struct{}           { return s.gone }
func (s *subscription) Close()                          { s.closed.Do(s.close) }

// drop ends the stream from the server's side.
func (s *subscription) drop(h *Hub, reason string) {
	s.goneOnce.Do(func() {
		close(s.gone)
		h.dropped.WithLabelValues(reason).Inc()
	})
}
