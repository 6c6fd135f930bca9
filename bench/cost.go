package bench

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
)

// What a stage cost the servers, per unit of its work (a feed entry, a
// read, a post): the numbers that size hosts, where throughput on this
// shared machine says little. Redis's come from each primary's INFO (cpu
// and commandstats) read before and after, as deltas: no counter of a
// shared server is reset.

// redisCounters is one Redis primary's counters at one moment.
type redisCounters struct {
	addr  string
	runID string  // a restarted or replaced server does not compare
	cpu   float64 // used_cpu_sys + used_cpu_user, seconds
	usec  map[string]int64
	calls map[string]int64
}

// primaries are the Redis servers that hold keys: the one server, or every
// primary of a cluster, discovered now (a failover changes which).
func primaries(ctx context.Context, rdb redis.UniversalClient) ([]*redis.Client, error) {
	switch c := rdb.(type) {
	case *redis.Client:
		return []*redis.Client{c}, nil
	case *redis.ClusterClient:
		out, err := nodes(ctx, c.ForEachMaster)
		sort.Slice(out, func(i, j int) bool { return out[i].Options().Addr < out[j].Options().Addr })
		return out, err
	default:
		return nil, fmt.Errorf("redis client %T: neither one server nor a cluster", rdb)
	}
}

// replicas are a cluster's replicas, discovered now (none for one server:
// the bench does not look for the replicas of a single Redis).
func replicas(ctx context.Context, rdb redis.UniversalClient) ([]*redis.Client, error) {
	c, ok := rdb.(*redis.ClusterClient)
	if !ok {
		return nil, nil
	}
	return nodes(ctx, c.ForEachSlave)
}

// nodes collects the clients forEach (a cluster's ForEachMaster or
// ForEachSlave) visits, which it does concurrently.
func nodes(ctx context.Context, forEach func(context.Context, func(context.Context, *redis.Client) error) error) ([]*redis.Client, error) {
	var mu sync.Mutex
	var out []*redis.Client
	err := forEach(ctx, func(_ context.Context, n *redis.Client) error {
		mu.Lock()
		defer mu.Unlock()
		out = append(out, n)
		return nil
	})
	return out, err
}

// redisSnapshot reads the counters of every primary, and of every replica
// (under "replica " + address).
func redisSnapshot(ctx context.Context, rdb redis.UniversalClient) (map[string]redisCounters, error) {
	nodes, err := primaries(ctx, rdb)
	if err != nil {
		return nil, fmt.Errorf("redis primaries: %w", err)
	}
	reps, err := replicas(ctx, rdb)
	if err != nil {
		return nil, fmt.Errorf("redis replicas: %w", err)
	}
	out := make(map[string]redisCounters, len(nodes)+len(reps))
	for _, n := range reps {
		info, err := n.Info(ctx, "server", "cpu").Result()
		if err != nil {
			continue // a replica that does not answer costs nothing we could count
		}
		c := parseInfo(info)
		c.addr = replicaKey + n.Options().Addr
		out[c.addr] = c
	}
	for _, n := range nodes {
		info, err := n.Info(ctx, "server", "cpu", "commandstats").Result()
		if err != nil {
			return nil, fmt.Errorf("INFO on %s: %w", n.Options().Addr, err)
		}
		c := parseInfo(info)
		c.addr = n.Options().Addr
		out[c.addr] = c
	}
	return out, nil
}

const replicaKey = "replica "

// parseInfo reads run_id, used_cpu_sys, used_cpu_user and the
// commandstats lines ("cmdstat_zadd:calls=2020000,usec=5547891,…").
func parseInfo(info string) redisCounters {
	c := redisCounters{usec: map[string]int64{}, calls: map[string]int64{}}
	for _, line := range strings.Split(info, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		switch {
		case k == "run_id":
			c.runID = v
		case k == "used_cpu_sys" || k == "used_cpu_user":
			f, _ := strconv.ParseFloat(v, 64)
			c.cpu += f
		case strings.HasPrefix(k, "cmdstat_"):
			name := strings.TrimPrefix(k, "cmdstat_")
			for _, kv := range strings.Split(v, ",") {
				field, val, _ := strings.Cut(kv, "=")
				n, _ := strconv.ParseInt(val, 10, 64)
				switch field {
				case "usec":
					c.usec[name] = n
				case "calls":
					c.calls[name] = n
				}
			}
		}
	}
	return c
}

// ShardCost is one Redis primary's work over a measurement, per unit.
type ShardCost struct {
	Addr string `json:"addr"`
	// CPUPerUnit is the server's CPU (used_cpu_sys + used_cpu_user: commands,
	// networking, replication to its replicas) in µs per unit.
	CPUPerUnit float64 `json:"cpu_us_per_unit"`
	// Share is this primary's part of the primaries' CPU (0–1): how evenly
	// the work spread.
	Share float64 `json:"share"`
	// Top is where the time in commands went (commandstats usec, µs per
	// unit: the wall time of each call; a command a script calls counts in
	// the script's time and again in its own): "evalsha 5.90".
	Top []string `json:"top"`
}

// RedisCost is what a measurement cost Redis, per unit of work, on every
// primary and in total.
type RedisCost struct {
	Unit  string `json:"unit"` // "entry", "read"
	Units int64  `json:"units"`
	// CPUPerUnit adds up the primaries'.
	CPUPerUnit float64     `json:"cpu_us_per_unit"`
	Shards     []ShardCost `json:"shards"`
	// ReplicaCPUPerUnit adds up the CPU of a cluster's replicas (applying
	// what their primaries send them), in µs per unit.
	ReplicaCPUPerUnit float64 `json:"replica_cpu_us_per_unit,omitempty"`
	// Changed names the primaries that were not the same server before and
	// after (a failover, a restart): left out of the sums.
	Changed []string `json:"changed,omitempty"`
}

// redisCost turns two snapshots into a cost per unit.
func redisCost(before, after map[string]redisCounters, units int64, unit string) *RedisCost {
	rc := &RedisCost{Unit: unit, Units: max(units, 1)}
	per := func(v float64) float64 { return v / float64(rc.Units) }
	addrs := make([]string, 0, len(after))
	for a, e := range after {
		if !strings.HasPrefix(a, replicaKey) {
			addrs = append(addrs, a)
		} else if b, ok := before[a]; ok && b.runID == e.runID {
			rc.ReplicaCPUPerUnit += per((e.cpu - b.cpu) * 1e6)
		}
	}
	for a := range before {
		if _, ok := after[a]; !ok && !strings.HasPrefix(a, replicaKey) {
			rc.Changed = append(rc.Changed, a)
		}
	}
	sort.Strings(addrs)
	for _, a := range addrs {
		b, ok := before[a]
		e := after[a]
		if !ok || b.runID != e.runID {
			rc.Changed = append(rc.Changed, a)
			continue
		}
		s := ShardCost{Addr: a, CPUPerUnit: per((e.cpu - b.cpu) * 1e6)}
		type cmd struct {
			name string
			usec int64
		}
		var cmds []cmd
		for name, u := range e.usec {
			if d := u - b.usec[name]; d > 0 && name != "info" {
				cmds = append(cmds, cmd{name, d})
			}
		}
		slices.SortFunc(cmds, func(x, y cmd) int { return int(y.usec - x.usec) })
		for _, c := range cmds[:min(len(cmds), 3)] {
			s.Top = append(s.Top, fmt.Sprintf("%s %.2f", c.name, per(float64(c.usec))))
		}
		rc.CPUPerUnit += s.CPUPerUnit
		rc.Shards = append(rc.Shards, s)
	}
	for i := range rc.Shards {
		if rc.CPUPerUnit > 0 {
			rc.Shards[i].Share = rc.Shards[i].CPUPerUnit / rc.CPUPerUnit
		}
	}
	sort.Strings(rc.Changed)
	return rc
}

// Cost is what a measurement cost, per unit of its work.
type Cost struct {
	// Redis is every Redis primary's cost.
	Redis *RedisCost `json:"redis"`
	// BenchCPUPerUnit is this process's CPU in µs per unit: the roles it
	// runs (serve, dispatch, the workers unless a stage started worker
	// processes) and the load generator's own client.
	BenchCPUPerUnit float64 `json:"bench_cpu_us_per_unit"`
	// PostgresCPUPerUnit is the CPU of the PostgreSQL backends of the
	// bench's database in µs per unit (0 when the server is not on this
	// machine).
	PostgresCPUPerUnit float64 `json:"postgres_cpu_us_per_unit"`
}

// measure reads every Redis primary's counters and the CPU of this process
// and of PostgreSQL, runs fn, reads them again and returns the cost per unit
// of what fn reports it did.
func (r *runner) measure(ctx context.Context, unit string, fn func() (int64, error)) (*Cost, error) {
	before, err := redisSnapshot(ctx, r.rdb)
	if err != nil {
		return nil, err
	}
	// What autovacuum does to a busy outbox (some CI machines turn it
	// off): without it, the finished rows of the runs before fill the
	// claim's partial index with dead entries, and every claim reads them.
	if _, err := r.pool.Exec(ctx, `VACUUM outbox`); err != nil {
		return nil, fmt.Errorf("vacuum outbox: %w", err)
	}
	self, pg := selfCPU(), postgresCPU(ctx, r.pool, r.watchPID())
	units, err := fn()
	if err != nil {
		return nil, err
	}
	self = selfCPU() - self
	pgCPU := postgresDelta(pg, postgresCPU(ctx, r.pool, r.watchPID()))
	after, err := redisSnapshot(ctx, r.rdb)
	if err != nil {
		return nil, err
	}
	rc := redisCost(before, after, units, unit)
	return &Cost{Redis: rc, BenchCPUPerUnit: self * 1e6 / float64(rc.Units), PostgresCPUPerUnit: pgCPU * 1e6 / float64(rc.Units)}, nil
}

// medianCost is the run whose total Redis CPU per unit is the median, so
// that its numbers belong together.
func medianCost(runs []*Cost) *Cost {
	if len(runs) == 0 {
		return nil
	}
	s := slices.Clone(runs)
	slices.SortFunc(s, func(a, b *Cost) int {
		switch {
		case a.Redis.CPUPerUnit < b.Redis.CPUPerUnit:
			return -1
		case a.Redis.CPUPerUnit > b.Redis.CPUPerUnit:
			return 1
		}
		return 0
	})
	return s[len(s)/2]
}

// selfCPU is this process's CPU time (user + system), in seconds.
func selfCPU() float64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// bytesPerEntry samples feeds and returns their Redis memory (MEMORY
// USAGE summed over the keys that hold each, the keys included) per post
// entry in them; 0 when their entries cannot be counted from outside (the
// memory stage, which fills feeds with a known number of entries, measures
// it for any encoding).
func (r *runner) bytesPerEntry(ctx context.Context, users []int64) (float64, error) {
	counts, countable, err := r.feedEntries(ctx, users)
	if err != nil || !countable {
		return 0, err
	}
	mem, err := r.feedBytes(ctx, users)
	if err != nil {
		return 0, err
	}
	var bytes, entries int64
	for i := range users {
		bytes += mem[i]
		entries += counts[i]
	}
	return perEntry(bytes, entries), nil
}

// isNil reports whether a command found nothing (redis.Nil), also when
// wrapped.
func isNil(err error) bool { return errors.Is(err, redis.Nil) }

// statCPU is utime + stime of a /proc/PID/stat line, in seconds.
func statCPU(s string) float64 {
	closing := strings.LastIndexByte(s, ')')
	if closing < 0 {
		return 0
	}
	// After "pid (comm) ": state ppid … utime is field 14, stime 15.
	f := strings.Fields(s[closing+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clockTicks
}

// clockTicks is USER_HZ, 100 on every Linux this runs on.
const clockTicks = 100

// postgresCPU is the CPU, in seconds, of every PostgreSQL backend
// connected to the database of pool's connections (the bench's, its roles'
// and its worker processes'), by pid, but the bench's watch connection
// (watch): the server's other work (other databases, the WAL writer, the
// checkpointer) is not counted. Empty when the server is not on this
// machine.
func postgresCPU(ctx context.Context, pool *pgxpool.Pool, watch int) map[int]float64 {
	rows, err := pool.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE datname = current_database()`)
	if err != nil {
		return nil
	}
	pids, err := pgx.CollectRows(rows, pgx.RowTo[int32])
	if err != nil {
		return nil
	}
	out := make(map[int]float64, len(pids))
	for _, pid := range pids {
		if int(pid) == watch {
			continue
		}
		cpu, ok := procCPU(int(pid))
		if !ok {
			return nil // not on this machine
		}
		out[int(pid)] = cpu
	}
	return out
}

// postgresDelta is the backends' CPU between two postgresCPU readings: a
// backend that started meanwhile counts whole, one that ended is lost.
func postgresDelta(before, after map[int]float64) float64 {
	var d float64
	for pid, cpu := range after {
		d += cpu - before[pid]
	}
	return d
}

// pidCPU is one process's CPU time, in seconds (0 when it is gone).
func pidCPU(pid int) float64 {
	cpu, _ := procCPU(pid)
	return cpu
}

// procCPU is a process's CPU time in seconds, all its threads: from
// /proc/PID/task/*/schedstat, in nanoseconds, where the kernel keeps it;
// else from /proc/PID/stat, in clock ticks of 10 ms (too coarse for the
// bench's dozens of backends). A thread that ended meanwhile is not counted
// by the first; Go keeps its threads.
func procCPU(pid int) (float64, bool) {
	dir := "/proc/" + strconv.Itoa(pid)
	if tasks, _ := filepath.Glob(dir + "/task/*/schedstat"); len(tasks) > 0 {
		var total float64
		for _, t := range tasks {
			b, err := os.ReadFile(t) //nolint:gosec // /proc
			if err != nil {
				continue
			}
			if f := strings.Fields(string(b)); len(f) > 0 {
				ns, _ := strconv.ParseFloat(f[0], 64)
				total += ns / 1e9
			}
		}
		return total, true
	}
	b, err := os.ReadFile(dir + "/stat") //nolint:gosec // /proc
	if err != nil {
		return 0, false
	}
	return statCPU(string(b)), true
}
