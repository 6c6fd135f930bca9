package feed

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"time"

	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
)

// Push adds post e to the feeds of followers that exist, whose readers
// follow the author now, and trims them. asOf is the PostgreSQL write
// position (store.WritePosition) read before the followers were: the feeds
// whose reader unfollowed someone or was rebuilt since are checked against
// their following hash, the others need no lookup (0: check every feed).
//
// first says that no feed can hold the post yet — the first delivery of
// its fan-out —, and then each feed takes it without being read (see
// appendScript), at a fraction of the cost. A feed that held it all the
// same (a redelivery that looked like a first one) holds it twice in its
// newest entries for a while, which no read and no count of the feed's
// entries sees: reads and rewrites keep one of each. Without first, a feed
// takes the post only if it is not there.
//
// A push is two steps: appendScript appends the post to the feeds it can
// (nearly all of a first push's), reading two small keys each, and hands
// back the others, which pushScript serves, and the heads it filled, which
// spillScript spills. It returns how many feeds gained the entry (with
// first, how many it was appended to; otherwise a repeated push gains
// none) and the followers whose feed holds it now.
func (f *Feeds) Push(ctx context.Context, e domain.Entry, followers []int64, asOf int64, first bool) (domain.PushResult, error) {
	metas := make([]string, len(followers))
	for i, u := range followers {
		metas[i] = f.keys.feed(u)
	}
	since := f.replicas.Begin(ctx, metas...) // the feeds' other keys share their slots
	if err := f.order.acquire(ctx, e.PostID); err != nil {
		return domain.PushResult{}, fmt.Errorf("push post %d to feeds: %w", e.PostID, err)
	}
	res, err := f.push(ctx, e, followers, metas, asOf, first, false)
	if err != nil && f.cfg.Cluster && ctx.Err() == nil && isRefusedByPrimary(err) {
		// A primary refuses a call on a key of a slot it no longer serves,
		// or is moving away (a reshard or a failover since the client read
		// the slot map) — mid-move, after writing the sets before that key.
		// The page runs again a set a call, routed by its keys (the client
		// follows the redirections), as a redelivery would: not first, so
		// that no feed takes the post twice. What the refused call wrote
		// goes uncounted, as a failed call's does.
		f.metrics.pushReruns.Inc()
		f.log.Info("a primary refused a push: pushing feed by feed", zap.Int64("post_id", e.PostID), zap.Error(err))
		again, againErr := f.push(ctx, e, followers, metas, asOf, false, true)
		again.Added += res.Added
		if againErr != nil { // keep what the first try knew holds the post
			again.Holders = union(res.Holders, again.Holders)
		}
		res, err = again, againErr
	}
	f.order.release()
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return res, fmt.Errorf("push post %d to feeds: %w", e.PostID, err)
	}
	return res, nil
}

func (f *Feeds) push(ctx context.Context, e domain.Entry, followers []int64, metas []string, asOf int64, first, perSet bool) (domain.PushResult, error) {
	calls, order := f.planCalls(ctx, len(followers), func(i int) string { return metas[i] }, perSet)
	followers, metas = reorder(followers, order), reorder(metas, order)
	var res domain.PushResult
	var full, spills []int64 // for the second step
	cmds, err := f.runScripts(ctx, appendScript, calls, func(c scriptCall) []string {
		keys := make([]string, 0, 2*(c.to-c.from))
		keys = append(keys, metas[c.from:c.to]...)
		for _, u := range followers[c.from:c.to] {
			keys = append(keys, f.keys.feedHead(u))
		}
		return keys
	}, e.PostID, spillAt(f.cfg.MaxLen), asOf, flag(first), 1)
	for i, c := range cmds {
		if c == nil || c.Err() != nil {
			continue
		}
		from, to := calls[i].from, calls[i].to
		lists, perr := placeLists(c.Val(), to-from, 4)
		if perr != nil {
			return res, perr
		}
		res.Added += len(lists[0])
		for k, into := range []*[]int64{&res.Holders, &full, &spills, &res.Missing} {
			for _, j := range lists[k] {
				*into = append(*into, followers[from+int(j)-1])
			}
		}
	}
	if err != nil {
		return res, err
	}
	if len(full) > 0 {
		if err := f.pushEach(ctx, e, full, asOf, first, perSet, &res); err != nil {
			return res, err
		}
	}
	if len(spills) > 0 {
		keys := make([]string, 0, 3*len(spills))
		for _, u := range spills {
			keys = append(keys, f.keys.feedSet(u).list()...)
		}
		if _, err := f.runOverKeys(ctx, spillScript, keys, 3, perSet, f.cfg.MaxLen, spillAt(f.cfg.MaxLen)); err != nil {
			return res, err
		}
	}
	return res, nil
}

// pushEach runs pushScript on the feeds of readers (those appendScript
// left), adding what it did to res.
func (f *Feeds) pushEach(ctx context.Context, e domain.Entry, readers []int64, asOf int64, first, perSet bool, res *domain.PushResult) error {
	calls, order := f.planCalls(ctx, len(readers), func(i int) string { return f.keys.feed(readers[i]) }, perSet)
	readers = reorder(readers, order)
	cmds, err := f.runScripts(ctx, pushScript, calls, func(c scriptCall) []string {
		keys := make([]string, 0, 4*(c.to-c.from))
		for _, u := range readers[c.from:c.to] {
			keys = append(keys, append(f.keys.feedSet(u).list(), f.keys.following(u))...)
		}
		return byKind(keys, 4)
	}, e.PostID, f.cfg.MaxLen, spillAt(f.cfg.MaxLen), e.AuthorID, f.buildTTLSeconds(), asOf, flag(first))
	for i, c := range cmds {
		if c == nil || c.Err() != nil {
			continue // its entries go uncounted: the retry finds them there
		}
		from, to := calls[i].from, calls[i].to
		added, lists, perr := pushResult(c.Val(), to-from)
		if perr != nil {
			return perr
		}
		res.Added += added
		for k, into := range []*[]int64{&res.Holders, &res.Missing} {
			for _, j := range lists[k] {
				*into = append(*into, readers[from+int(j)-1])
			}
		}
	}
	return err
}

// union is the ids of a and b, each once.
func union(a, b []int64) []int64 {
	seen := make(map[int64]bool, len(a)+len(b))
	var out []int64
	for _, id := range append(slices.Clip(a), b...) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// pushResult reads pushScript's answer for a call on n sets: how many
// gained the post, and the places (from 1) of those that hold it and of
// those that are not there.
func pushResult(v any, n int) (added int, lists [][]int64, err error) {
	parts, ok := v.([]any)
	if !ok || len(parts) != 3 {
		return 0, nil, fmt.Errorf("push: unexpected answer %v", v)
	}
	count, ok := parts[0].(int64)
	if !ok {
		return 0, nil, fmt.Errorf("push: unexpected count %v", parts[0])
	}
	if lists, err = placeLists(parts[1:], n, 2); err != nil {
		return 0, nil, err
	}
	return int(count), lists, nil
}

// placeLists reads an answer of k lists of places in KEYS (from 1) of a
// call on n sets.
func placeLists(v any, n, k int) ([][]int64, error) {
	parts, ok := v.([]any)
	if !ok || len(parts) != k {
		return nil, fmt.Errorf("push: unexpected answer %v", v)
	}
	lists := make([][]int64, k)
	for i := range lists {
		items, ok := parts[i].([]any)
		if !ok {
			return nil, fmt.Errorf("push: unexpected list %v", parts[i])
		}
		for _, it := range items {
			j, ok := it.(int64)
			if !ok || j < 1 || j > int64(n) {
				return nil, fmt.Errorf("push: unexpected place %v", it)
			}
			lists[i] = append(lists[i], j)
		}
	}
	return lists, nil
}

// Remove takes posts out of the feeds of users.
func (f *Feeds) Remove(ctx context.Context, users []int64, postIDs []int64) error {
	if len(postIDs) == 0 {
		return nil
	}
	keys := make([]string, 0, 3*len(users))
	for _, u := range users {
		keys = append(keys, f.keys.feedSet(u).list()...)
	}
	since := f.replicas.Begin(ctx, keys...)
	_, err := f.runOverKeys(ctx, removeScript, keys, 3, true, int64sToArgs(postIDs)...)
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

// Drop deletes a user's feed, following hash and cached celebrity list, and
// the mark of a reader who follows many; the next read rebuilds them from
// PostgreSQL.
func (f *Feeds) Drop(ctx context.Context, userID int64) error {
	since := f.replicas.Begin(ctx, f.keys.feed(userID))
	err := f.drop(ctx, userID, f.keys.followsMany(userID))
	if err == nil {
		err = f.replicas.Wait(ctx, since)
	}
	if err != nil {
		return fmt.Errorf("drop feed %d: %w", userID, err)
	}
	return nil
}

// drop deletes a user's feed, following hash and cached celebrity list, and
// also the other keys of theirs named.
func (f *Feeds) drop(ctx context.Context, userID int64, also ...string) error {
	keys := append(f.keys.feedSet(userID).list(), f.keys.following(userID), f.keys.celebrities(userID))
	return f.rdb.Del(ctx, append(keys, also...)...).Err()
}

// flag is a boolean as the scripts take it.
func flag(b bool) int {
	if b {
		return 1
	}
	return 0
}

func int64sToArgs(ids []int64) []any {
	args := make([]any, len(ids))
	for i, id := range ids {
		args[i] = strconv.FormatInt(id, 10)
	}
	return args
}

// PushOwn puts an entry into its author's own feed, in the request that
// created it: the author reads it from the 201 on. The fan-out pushes it
// there too, so this push looks before it adds (first false), and asOf 0
// makes the feed's following hash decide (it holds its reader). When the
// push fails the feed is dropped, and the next read rebuilds it with the
// entry; the error says that failed too (Redis is down: reads come from
// PostgreSQL, which has the entry).
func (f *Feeds) PushOwn(ctx context.Context, e domain.Entry) error {
	_, err := f.Push(ctx, e, []int64{e.AuthorID}, 0, false)
	if err == nil {
		return nil
	}
	// A drop of its own: the push may have spent the caller's budget.
	dropCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ownDropTimeout)
	defer cancel()
	if dropErr := f.Drop(dropCtx, e.AuthorID); dropErr != nil {
		return err
	}
	return nil
}

// ownDropTimeout bounds PushOwn's drop after a failed push: a request waits
// no longer on a Redis that stopped answering.
const ownDropTimeout = 100 * time.Millisecond
