package bench

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/newsfeed/newsfeed/internal/probe"
)

// Prefix keeps the bench's Redis keys apart from a real install's, when it
// runs the system in process.
const Prefix = "nfbench:"

// DatabaseSuffix is added to the name of database.url's database to name
// the database of a run in process.
const DatabaseSuffix = "_bench"

// Harness is the system under test: StartInProcess runs one in this
// process, Attach measures processes that run already.
type Harness struct {
	// APIURL is the base URL of a serve process (or the in-process API).
	APIURL string
	// Secret signs the bench's bearer tokens.
	Secret []byte
	// Pool is the PostgreSQL the system uses; the bench seeds it.
	Pool *pgxpool.Pool
	// Redis is the Redis the system uses, and Prefix its key prefix.
	Redis  redis.UniversalClient
	Prefix string
	// StopWorkers stops the in-process workers so that the big fan-out can
	// run in a worker process of its own, whose memory is measured. Nil when
	// the workers are not in process: the big fan-out then runs on them and
	// memory is not reported.
	StopWorkers func()
	// WorkerCommand is the command of one `newsfeed work` process, not yet
	// started (and with Stderr unset): the bench starts it, watches it, and
	// fails the stage it serves if it exits before the stage ends.
	WorkerCommand func() (*exec.Cmd, error)
	// SetLive restarts the in-process workers with the live path (on, as
	// they start) or without it (off: Roles.WorkersWithoutLive), so that the
	// live stage measures fan-out without it in the same run. Nil when the
	// workers are not in process or cannot run without it; an error once
	// StopWorkers stopped them.
	SetLive func(on bool) error
}

// FreshDatabase names the database of a run in process, dbURL's with
// DatabaseSuffix, and drops it, so that every run starts the same: the caller
// creates it again (migrate) before it starts the system.
func FreshDatabase(ctx context.Context, dbURL string) (string, error) {
	benchURL, err := withDatabaseSuffix(dbURL, DatabaseSuffix)
	if err != nil {
		return "", err
	}
	if err := recreateDatabase(ctx, benchURL); err != nil {
		return "", err
	}
	return benchURL, nil
}

// Roles are the roles of a system the bench runs in this process. Each runs
// until its context ends; what it returns is not reported (a role that
// stops early shows as an API that does not become healthy).
type Roles struct {
	// Front serves the API and dispatches the outbox.
	Front func(ctx context.Context) error
	// Workers fan posts out. They run apart from Front, so that the big
	// fan-out can move to a worker process of its own.
	Workers func(ctx context.Context) error
	// WorkersWithoutLive, when set, are the same workers without the live
	// path (no live publisher: fan-out as it was before live streams), the
	// live stage's baseline (Harness.SetLive).
	WorkersWithoutLive func(ctx context.Context) error
	// Close releases the system once its roles have stopped.
	Close func()
}

// StartInProcess clears h.Prefix in h.Redis, runs the roles and waits until
// the API at h.APIURL is healthy. It returns h with StopWorkers set, and the
// cleanup that stops every role and closes the system. roles.Close is called
// on every path: at once when the start fails, else by the cleanup.
func StartInProcess(ctx context.Context, h Harness, roles Roles) (Harness, func(), error) {
	if h.Prefix == "" {
		roles.Close()
		return Harness{}, nil, errors.New("bench in process: no Redis key prefix (it would clear the whole database)")
	}
	if err := deletePrefix(ctx, h.Redis, h.Prefix); err != nil {
		roles.Close()
		return Harness{}, nil, err
	}
	roleCtx, stopRoles := context.WithCancel(ctx)
	var front sync.WaitGroup
	front.Add(1)
	go func() { defer front.Done(); _ = roles.Front(roleCtx) }()
	workers := &inProcessWorkers{ctx: roleCtx}
	_ = workers.start(roles.Workers)
	cleanup := func() {
		workers.stop(false)
		stopRoles()
		front.Wait()
		workers.stop(true)
		// What the run wrote goes with it (a million feeds of a big fan-out
		// would otherwise stay in the user's Redis, and slow every SCAN).
		clearCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Minute)
		_ = deletePrefix(clearCtx, h.Redis, h.Prefix) // best effort: the next run clears it first
		cancel()
		roles.Close()
	}
	if err := probe.WaitHealthy(ctx, h.APIURL); err != nil {
		cleanup()
		return Harness{}, nil, err
	}
	h.StopWorkers = func() { workers.stop(true) }
	if roles.WorkersWithoutLive != nil {
		h.SetLive = func(on bool) error {
			if on {
				return workers.start(roles.Workers)
			}
			return workers.start(roles.WorkersWithoutLive)
		}
	}
	return h, cleanup, nil
}

// inProcessWorkers runs one kind of in-process workers at a time.
type inProcessWorkers struct {
	ctx     context.Context
	mu      sync.Mutex
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	stopped bool // by StopWorkers, for good
}

// start stops the workers that run and runs role instead.
func (w *inProcessWorkers) start(role func(context.Context) error) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return errors.New("the in-process workers were stopped for worker processes of the bench's own")
	}
	w.halt()
	ctx, cancel := context.WithCancel(w.ctx)
	w.cancel = cancel
	w.wg.Add(1)
	go func() { defer w.wg.Done(); _ = role(ctx) }()
	return nil
}

// stop cancels the workers that run; with wait, for good, once they stopped.
func (w *inProcessWorkers) stop(wait bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !wait {
		if w.cancel != nil {
			w.cancel()
		}
		return
	}
	w.stopped = true
	w.halt()
}

func (w *inProcessWorkers) halt() {
	if w.cancel != nil {
		w.cancel()
	}
	w.wg.Wait()
}

// Attach measures processes that already run behind h.APIURL: it waits
// until they are healthy and returns h with closeConns, which releases h's
// connections, as its cleanup (called at once when they do not become
// healthy).
func Attach(ctx context.Context, h Harness, closeConns func()) (Harness, func(), error) {
	if err := probe.WaitHealthy(ctx, h.APIURL); err != nil {
		closeConns()
		return Harness{}, nil, err
	}
	return h, closeConns, nil
}

// DatabaseURL is the URL of the database that a run in process uses beside
// dbURL's (FreshDatabase makes it afresh).
func DatabaseURL(dbURL string) (string, error) {
	return withDatabaseSuffix(dbURL, DatabaseSuffix)
}

// ClusterPrefix is the key prefix of a run in process on a Redis Cluster:
// Prefix and the bench database's name, so that benches of other databases
// (tests) on the same shared cluster keep apart.
func ClusterPrefix(benchURL string) (string, error) {
	cfg, err := pgx.ParseConfig(benchURL)
	if err != nil {
		return "", fmt.Errorf("database.url: %w", err)
	}
	name := strings.NewReplacer("{", "_", "}", "_").Replace(cfg.Database) // no hash tag of its own
	return Prefix + name + ":", nil
}

func withDatabaseSuffix(dbURL, suffix string) (string, error) {
	u, err := url.Parse(dbURL)
	if err != nil {
		return "", fmt.Errorf("database.url: %w", err)
	}
	u.Path += suffix
	return u.String(), nil
}

// recreateDatabase drops the bench database, so every run starts the same.
func recreateDatabase(ctx context.Context, dbURL string) error {
	cfg, err := pgx.ParseConfig(dbURL)
	if err != nil {
		return fmt.Errorf("database.url: %w", err)
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("database.url: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("drop bench database: %w", err)
	}
	return nil
}

// ClearPrefix deletes every key under prefix: on a Redis Cluster, those of
// every primary.
func ClearPrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	return deletePrefix(ctx, rdb, prefix)
}

func deletePrefix(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	if c, ok := rdb.(*redis.ClusterClient); ok {
		// SCAN sees one node's keys; the deletes go through the cluster client,
		// which sends each to the primary of its slot now.
		return c.ForEachMaster(ctx, func(ctx context.Context, node *redis.Client) error {
			return deleteScanned(ctx, node, rdb, prefix)
		})
	}
	return deleteScanned(ctx, rdb, rdb, prefix)
}

// deleteScanned unlinks with del the keys under prefix that scan finds.
func deleteScanned(ctx context.Context, scan, del redis.UniversalClient, prefix string) error {
	iter := scan.Scan(ctx, 0, prefix+"*", 10_000).Iterator()
	batch := make([]string, 0, 1000)
	flush := func() error {
		if len(batch) == 0 {
			return nil
		}
		_, err := del.Pipelined(ctx, func(p redis.Pipeliner) error {
			for _, k := range batch {
				p.Unlink(ctx, k)
			}
			return nil
		})
		batch = batch[:0]
		return err
	}
	for iter.Next(ctx) {
		if batch = append(batch, iter.Val()); len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return err
			}
		}
	}
	if err := iter.Err(); err != nil {
		return err
	}
	return flush()
}
