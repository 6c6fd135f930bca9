package feed

import (
	"context"
	"fmt"
	"strconv"

	"github.com/redis/go-redis/v9"
)

// Push adds post postID by authorID to the feeds of followers that exist,
// whose readers follow the author now, and trims them. asOf is the
// PostgreSQL write position (store.WritePosition) read before the followers
// were: the feeds whose reader unfollowed someone or was rebuilt since are
// checked against their following hash, the others need no lookup (0:
// check every feed). It returns how many feeds gained the entry (a
// repeated push gains none).
func (f *Feeds) Push(ctx context.Context, authorID, postID int64, followers []int64, asOf int64) (int, error) {
	keys := make([]string, 0, 3*len(followers))
	for _, u := range followers {
		keys = append(keys, f.keys.feed(u), f.keys.feedTail(u), f.keys.following(u))
	}
	since := f.replicas.Begin(ctx, keys...)
	if err := f.order.acquire(ctx, postID); err != nil {
		return 0, fmt.Errorf("push post %d to feeds: %w", postID, err)
	}
	added, err := f.runOverKeys(ctx, pushScript, keys, 3, postID, f.cfg.MaxLen, spillAt(f.cfg.MaxLen), authorID, f.buildTTLSeconds(), asOf)
	f.order.release()
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return added, fmt.Errorf("push post %d to feeds: %w", postID, err)
	}
	return added, nil
}

// Remove takes posts out of the feeds of users.
func (f *Feeds) Remove(ctx context.Context, users []int64, postIDs []int64) error {
	if len(postIDs) == 0 {
		return nil
	}
	keys := make([]string, 0, 2*len(users))
	for _, u := range users {
		keys = append(keys, f.keys.feed(u), f.keys.feedTail(u))
	}
	since := f.replicas.Begin(ctx, keys...)
	_, err := f.runOverKeys(ctx, removeScript, keys, 2, int64sToArgs(postIDs)...)
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("remove posts from feeds: %w", err)
	}
	return nil
}

// ForgetPost marks a deleted post in the post cache, so that no read shows it
// even while feeds still list it.
func (f *Feeds) ForgetPost(ctx context.Context, postID int64) error {
	since := f.replicas.Begin(ctx, f.keys.post(postID))
	err := f.rdb.Set(ctx, f.keys.post(postID), tombstone, f.cfg.PostTTL).Err()
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("forget post %d: %w", postID, err)
	}
	return nil
}

// Drop deletes a user's feed, following hash and cached celebrity list; the
// next read rebuilds them from PostgreSQL.
func (f *Feeds) Drop(ctx context.Context, userID int64) error {
	since := f.replicas.Begin(ctx, f.keys.feed(userID))
	err := f.drop(ctx, userID)
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("drop feed %d: %w", userID, err)
	}
	return nil
}

func (f *Feeds) drop(ctx context.Context, userID int64) error {
	return f.rdb.Del(ctx, f.keys.feed(userID), f.keys.feedTail(userID), f.keys.following(userID), f.keys.celebrities(userID)).Err()
}

// runOverKeys runs a script that changes many sets alike, whose KEYS come
// in groups of keysPer (a set's head and tail, and for a feed its reader's
// following hash): one call
// per maxScriptKeys groups on a single Redis, one call per group on a Redis
// Cluster (a script may only touch keys of one slot, and the keys of a group
// share one), in pipelines of at most maxPipeline calls. It returns the sum
// of the results of the calls that ran — also when some failed, so that what
// they wrote is counted once even though the caller will try again. (The
// callers wait for the replicas, with WaitReplicas.)
func (f *Feeds) runOverKeys(ctx context.Context, s *redis.Script, keys []string, keysPer int, args ...any) (int, error) {
	per := maxScriptKeys * keysPer
	if f.cfg.Cluster {
		per = keysPer
	}
	calls := (len(keys) + per - 1) / per
	total := 0
	for first := 0; first < calls; first += maxPipeline {
		cmds, err := f.runScripts(ctx, s, min(maxPipeline, calls-first), func(i int) []string {
			c := first + i
			return keys[c*per : min((c+1)*per, len(keys))]
		}, args...)
		for _, c := range cmds {
			if c.Err() == nil {
				n, _ := c.Int()
				total += n
			}
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// runScripts sends n calls of s in one pipeline, the i-th on keysOf(i), by
// its SHA. Redis forgets scripts when it restarts, and a replica promoted by
// a failover never had them: the calls that got NOSCRIPT are sent again with
// the script's body (EVAL, which also caches it on that node), and the calls
// that succeeded keep their results. (Resending the whole pipeline would be
// safe — every call is idempotent — but the calls that had succeeded would
// then report 0, and what they wrote would go uncounted.)
func (f *Feeds) runScripts(ctx context.Context, s *redis.Script, n int, keysOf func(i int) []string, args ...any) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, n)
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			cmds[i] = s.EvalSha(ctx, p, keysOf(i), args...)
		}
		return nil
	})
	if err == nil {
		return cmds, nil
	}
	var again []int
	for i, c := range cmds {
		if e := c.Err(); e != nil {
			if !isNoScript(e) {
				return cmds, err
			}
			again = append(again, i)
		}
	}
	if len(again) == 0 {
		return cmds, err
	}
	_, err = f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, i := range again {
			cmds[i] = s.Eval(ctx, p, keysOf(i), args...)
		}
		return nil
	})
	return cmds, err
}

func int64sToArgs(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = strconv.FormatInt(id, 10)
	}
	return args
}
