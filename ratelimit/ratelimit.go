// Package ratelimit limits how often one user may do a thing, across every
// process that shares a Redis: GCRA (the generic cell rate algorithm) from
// github.com/go-redis/redis_rate, with its state in one small Redis string per
// user and action that expires once the user is idle.
//
// It fails open: when Redis does not answer, the caller is told so and is
// expected to let the request through — a rate limit protects the system, and
// an unreachable limiter must not take writes down with it.
package ratelimit

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/go-redis/redis_rate/v10"
	"github.com/redis/go-redis/v9"
)

// Limiter decides whether one more event of an action is allowed for a user.
type Limiter struct {
	gcra   *redis_rate.Limiter
	prefix string
}

// New builds a limiter over rdb. Its keys are prefix + "rate:" + action +
// ":{" + user + "}": behind the product's prefix like every key it writes,
// and hash-tagged by user so that a Redis Cluster spreads them.
func New(rdb redis.UniversalClient, prefix string) *Limiter {
	return &Limiter{gcra: redis_rate.NewLimiter(prefixed{rdb, prefix}), prefix: prefix}
}

// Allow counts one event of action by user against perMinute events a
// minute (with a burst of as many). It returns 0 when the event may happen,
// and otherwise how long until the next one would be allowed. perMinute ≤ 0
// means no limit. An error means Redis did not answer; nothing was counted.
func (l *Limiter) Allow(ctx context.Context, action string, user int64, perMinute int) (time.Duration, error) {
	if perMinute <= 0 {
		return 0, nil
	}
	res, err := l.gcra.Allow(ctx, Key(action, user), redis_rate.PerMinute(perMinute))
	if err != nil {
		return 0, fmt.Errorf("rate limit %s: %w", action, err)
	}
	if res.Allowed > 0 {
		return 0, nil
	}
	// redis_rate rounds nothing: a refusal always waits a little.
	return max(res.RetryAfter, time.Millisecond), nil
}

// Key is the limiter's key of action and user, before the product's prefix
// and the "rate:" that redis_rate puts in front of it.
func Key(action string, user int64) string {
	return action + ":{" + strconv.FormatInt(user, 10) + "}"
}

// prefixed gives redis_rate the client it asks for, with every key moved
// behind the product's prefix: redis_rate names its keys "rate:<key>", and
// redis.prefix promises that every key the product writes starts with it.
type prefixed struct {
	redis.UniversalClient
	prefix string
}

func (p prefixed) keys(keys []string) []string {
	out := make([]string, len(keys))
	for i, k := range keys {
		out[i] = p.prefix + k
	}
	return out
}

func (p prefixed) Eval(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.UniversalClient.Eval(ctx, script, p.keys(keys), args...)
}

func (p prefixed) EvalSha(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return p.UniversalClient.EvalSha(ctx, sha, p.keys(keys), args...)
}

func (p prefixed) EvalRO(ctx context.Context, script string, keys []string, args ...any) *redis.Cmd {
	return p.UniversalClient.EvalRO(ctx, script, p.keys(keys), args...)
}

func (p prefixed) EvalShaRO(ctx context.Context, sha string, keys []string, args ...any) *redis.Cmd {
	return p.UniversalClient.EvalShaRO(ctx, sha, p.keys(keys), args...)
}

func (p prefixed) Del(ctx context.Context, keys ...string) *redis.IntCmd {
	return p.UniversalClient.Del(ctx, p.keys(keys)...)
}
