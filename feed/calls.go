package feed

import (
	"context"
	"errors"
	"sync"

	"github.com/redis/go-redis/v9"
)

// A scriptCall is one call of a script on the sets [from, to) of its
// caller's list.
type scriptCall struct {
	from, to int
	// primary is, on a Redis Cluster, the primary that serves the slots of
	// all the call's sets: the call runs there, its keys passed as
	// arguments (callKeys in lua/common.lua). nil: f.rdb sends the call,
	// routed by its KEYS.
	primary *redis.Client
}

// planCalls lays out n sets, the i-th named by a key of its slot, keyOf(i),
// for calls of a script that takes many: it returns the calls and the
// order to list the sets in for them (nil: as they are).
//
// On one Redis a call takes up to maxScriptKeys sets. On a Redis Cluster a
// call may declare keys of one slot only, and each user's keys have a slot
// of their own, so that a call declaring its keys serves one set — and
// the cost of a call, several times a set's work, was most of a fan-out's
// Redis CPU there. So the sets are put in order of the primary that serves
// their slot (as the client's slot map says), and each primary takes calls
// of up to maxScriptKeys of its sets. perSet asks for the call per set,
// routed by its keys, instead: for scripts whose keys cannot follow their
// arguments, and to run again what a primary refused (a slot moved since
// the map was read; the client follows the cluster's redirections).
func (f *Feeds) planCalls(ctx context.Context, n int, keyOf func(i int) string, perSet bool) (calls []scriptCall, order []int) {
	cluster, ok := f.rdb.(*redis.ClusterClient)
	if !f.cfg.Cluster || !ok || perSet {
		per := maxScriptKeys
		if f.cfg.Cluster {
			per = 1
		}
		return chunk(nil, 0, n, per, nil), nil
	}
	primaries := make([]*redis.Client, n)
	runs := map[*redis.Client]int{} // sets per primary
	for i := range n {
		p, err := cluster.MasterForKey(ctx, keyOf(i))
		if err != nil {
			return f.planCalls(ctx, n, keyOf, true) // no slot map yet: the routed calls wait for one
		}
		primaries[i] = p
		runs[p]++
	}
	// The primaries' runs, in the order each first appears, each cut into
	// calls; then every set to its place in its primary's run.
	next := map[*redis.Client]int{} // the place of the run's next set
	pos := 0
	for _, p := range primaries {
		if _, seen := next[p]; !seen {
			next[p] = pos
			calls = chunk(calls, pos, pos+runs[p], maxScriptKeys, p)
			pos += runs[p]
		}
	}
	order = make([]int, n)
	for i, p := range primaries {
		order[next[p]] = i
		next[p]++
	}
	return calls, order
}

// chunk appends to calls the sets [from, to), at most per a call, each
// call on primary.
func chunk(calls []scriptCall, from, to, per int, primary *redis.Client) []scriptCall {
	for c := from; c < to; c += per {
		calls = append(calls, scriptCall{from: c, to: min(c+per, to), primary: primary})
	}
	return calls
}

// reorder returns list in order (order[i] is the place in list of the
// result's i-th); list itself when order is nil.
func reorder[T any](list []T, order []int) []T {
	if order == nil {
		return list
	}
	out := make([]T, len(order))
	for i, j := range order {
		out[i] = list[j]
	}
	return out
}

// runScripts runs s once per call, on the keys keysOf(call) names, with
// args. The calls routed by their keys go through f.rdb in pipelines of at
// most maxPipeline calls; each primary's calls go to it in pipelines of
// their own, the primaries side by side. It returns a command per call,
// nil for a call never sent, and the errors of the pipelines that failed,
// joined.
//
// Calls go by the script's SHA. Redis forgets scripts when it restarts, and
// a replica promoted by a failover never had them: the calls that got
// NOSCRIPT are sent again with the script's body (EVAL, which also caches it
// on that node), and the calls that succeeded keep their results.
// (Resending the whole pipeline would be safe — every call is idempotent —
// but the calls that had succeeded would then report 0, and what they wrote
// would go uncounted.)
func (f *Feeds) runScripts(ctx context.Context, s *redis.Script, calls []scriptCall, keysOf func(c scriptCall) []string, args ...any) ([]*redis.Cmd, error) {
	cmds := make([]*redis.Cmd, len(calls))
	var routed []int
	byPrimary := map[*redis.Client][]int{}
	for i, c := range calls {
		if c.primary == nil {
			routed = append(routed, i)
		} else {
			byPrimary[c.primary] = append(byPrimary[c.primary], i)
		}
	}
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		failed error
	)
	run := func(rdb pipeliner, idx []int, keysInArgs bool) {
		send := func(p redis.Pipeliner, i int, eval bool) *redis.Cmd {
			keys, a := keysOf(calls[i]), args
			if keysInArgs {
				// Undeclared: KEYS must share a slot, these need not.
				a = make([]any, 0, len(args)+len(keys))
				a = append(a, args...)
				for _, k := range keys {
					a = append(a, k)
				}
				keys = nil
			}
			if eval {
				return s.Eval(ctx, p, keys, a...)
			}
			return s.EvalSha(ctx, p, keys, a...)
		}
		if err := pipelineScripts(ctx, rdb, idx, cmds, send); err != nil {
			mu.Lock()
			failed = errors.Join(failed, err)
			mu.Unlock()
		}
	}
	for p, idx := range byPrimary {
		wg.Go(func() { run(p, idx, true) })
	}
	if len(routed) > 0 {
		run(f.rdb, routed, false)
	}
	wg.Wait()
	return cmds, failed
}

// pipeliner is what runScripts sends through: f.rdb, or one primary.
type pipeliner interface {
	Pipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
}

// pipelineScripts sends the calls idx through rdb, at most maxPipeline a
// pipeline, each by send (by SHA; eval: with the body), filling cmds; the
// calls that got NOSCRIPT go again with the body. It stops at the first
// pipeline that failed otherwise.
func pipelineScripts(ctx context.Context, rdb pipeliner, idx []int, cmds []*redis.Cmd, send func(p redis.Pipeliner, i int, eval bool) *redis.Cmd) error {
	for start := 0; start < len(idx); start += maxPipeline {
		part := idx[start:min(start+maxPipeline, len(idx))]
		_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range part {
				cmds[i] = send(p, i, false)
			}
			return nil
		})
		if err == nil {
			continue
		}
		var again []int
		for _, i := range part {
			if e := cmds[i].Err(); e != nil {
				if !isNoScript(e) {
					return e // the first that is not NOSCRIPT says what went wrong
				}
				again = append(again, i)
			}
		}
		if len(again) == 0 {
			return err
		}
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, i := range again {
				cmds[i] = send(p, i, true)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// runOverKeys runs a script that changes many sets alike, whose keys come
// in groups of keysPer (a set's meta, head and tail, and for a feed its
// reader's following hash; each call takes its KEYS kind by kind, byKind),
// in the calls planCalls lays out (perSet: one a set, for a script whose
// keys cannot follow its arguments). It returns the sum of the results of
// the calls that ran — also when some failed, so that what they wrote is
// counted once even though the caller will try again. (The callers wait for
// the replicas, with WaitReplicas.)
func (f *Feeds) runOverKeys(ctx context.Context, s *redis.Script, keys []string, keysPer int, perSet bool, args ...any) (int, error) {
	calls, order := f.planCalls(ctx, len(keys)/keysPer, func(i int) string { return keys[i*keysPer] }, perSet)
	cmds, err := f.runScripts(ctx, s, calls, func(c scriptCall) []string {
		group := make([]string, 0, (c.to-c.from)*keysPer)
		for g := c.from; g < c.to; g++ {
			at := g
			if order != nil {
				at = order[g]
			}
			group = append(group, keys[at*keysPer:(at+1)*keysPer]...)
		}
		return byKind(group, keysPer)
	}, args...)
	total := 0
	for _, c := range cmds {
		if c != nil && c.Err() == nil {
			n, _ := c.Int()
			total += n
		}
	}
	return total, err
}

// byKind lays out keys, given in groups of keysPer (one set's keys), kind
// by kind: the first key of every group, then the second of every group, and
// so on — how the scripts take them, so that they read all the first keys
// (the metas) in one MGET of a run of KEYS, with no table to build.
func byKind(keys []string, keysPer int) []string {
	if keysPer == 1 || len(keys) == keysPer {
		return keys
	}
	groups := len(keys) / keysPer
	out := make([]string, len(keys))
	for g := range groups {
		for k := range keysPer {
			out[k*groups+g] = keys[g*keysPer+k]
		}
	}
	return out
}
