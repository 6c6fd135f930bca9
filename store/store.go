// Package store is the PostgreSQL side of newsfeed: posts, follows and the
// outbox, through pgx. It is an adapter: it speaks domain's vocabulary and
// implements the small interfaces its users declare — the services (outbox,
// fanout, api), the operator console (admin) and the Redis adapter that
// caches feeds (feed.Store) — without importing any of them.
package store

import (
	"context"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/newsfeed/newsfeed/internal/backoff"
)

// DB is the PostgreSQL store. Only the listings that users page through
// (Followers, Following, AuthorPosts) read the read pool, a replica when
// database.read_url names one (and Replayed asks it how far it got). Everything else uses the primary, since a
// lagging replica would lose posts from feeds: writes, the outbox, fan-out's
// follower-id pages and chunks, the reads that rebuild a feed (Followees,
// FolloweePosts, AuthorPostIDsSince), post lookups and counts.
type DB struct {
	primary *pgxpool.Pool
	read    *pgxpool.Pool
}

// New wraps pools that the caller owns. read may be nil to read from primary.
func New(primary, read *pgxpool.Pool) *DB {
	if read == nil {
		read = primary
	}
	return &DB{primary: primary, read: read}
}

// Ping checks that the primary answers.
func (db *DB) Ping(ctx context.Context) error { return db.primary.Ping(ctx) }

// Connect opens a pool to url, retrying for up to wait while the server is
// unreachable, so that a process started beside its database does not fail.
// Its sessions keep the server's statement_timeout (Dial sets one).
func Connect(ctx context.Context, url string, maxConns int32, wait time.Duration) (*pgxpool.Pool, error) {
	return Dial(ctx, PoolConfig{URL: url, MaxConns: maxConns, ConnectWait: wait})
}

// PoolConfig configures a pool that Dial opens.
type PoolConfig struct {
	// URL is the server's, in libpq's URL or key=value form.
	URL string
	// MaxConns bounds the pool's connections. Defaults to pgx's.
	MaxConns int32
	// ConnectWait is how long Dial retries a server that does not answer.
	ConnectWait time.Duration
	// StatementTimeout is the statement_timeout and
	// idle_in_transaction_session_timeout of every session, unless URL
	// sets them: how long the server goes on with a statement (or holds a
	// transaction's locks) for a client that gave up or was cut off — a
	// context's deadline ends the wait on the client's side only. 0 keeps
	// the server's.
	StatementTimeout time.Duration
}

// The bounds of every pool's connections (docs/DESIGN.md, "Timeouts").
const (
	// defaultConnectTimeout bounds one connection's dial, TLS and start-up
	// (connect_timeout, unless the URL sets it): pgxpool makes connections
	// in the background, past the context of the request that asked, and
	// one to a silent server would hold its place in the pool for ever.
	defaultConnectTimeout = 2 * time.Second
	// keepAliveIdle, keepAliveInterval and keepAliveCount: TCP keepalive
	// finds a connection whose server went away without a word (a host
	// gone, a NAT that forgot it) after 15 s + 3 × 5 s idle, instead of the
	// kernel's two hours, so that the pool drops it before anyone uses it.
	keepAliveIdle     = 15 * time.Second
	keepAliveInterval = 5 * time.Second
	keepAliveCount    = 3
)

// statementGrace is how long past statement_timeout a statement's caller
// waits for the server's answer (its error, at the latest) before it gives
// up on a server that says nothing.
const statementGrace = time.Second

// statementDeadline gives a statement whose caller set no deadline (the
// background roles' loops) one: statement_timeout and statementGrace. It is
// a pgx QueryTracer because pgx runs the statement with the context
// TraceQueryStart returns; TraceQueryEnd (for rows, when they close)
// releases its timer.
type statementDeadline struct{ timeout time.Duration }

// cancelKey holds, in a context statementDeadline made, its CancelFunc.
type cancelKey struct{}

// TraceQueryStart bounds ctx, unless it has a deadline of its own.
func (d statementDeadline) TraceQueryStart(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryStartData) context.Context {
	if _, ok := ctx.Deadline(); ok {
		return ctx
	}
	ctx, cancel := context.WithTimeout(ctx, d.timeout)
	return context.WithValue(ctx, cancelKey{}, cancel)
}

// TraceQueryEnd releases what TraceQueryStart made.
func (statementDeadline) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	if cancel, ok := ctx.Value(cancelKey{}).(context.CancelFunc); ok {
		cancel()
	}
}

// keepAlive is the TCP keepalive of the product's connections.
var keepAlive = net.KeepAliveConfig{Enable: true, Idle: keepAliveIdle, Interval: keepAliveInterval, Count: keepAliveCount}

// Dial opens a pool as cfg says, retrying for up to cfg.ConnectWait while
// the server is unreachable. A call on the pool ends when its context does,
// also with the server silent: pgx's default context watcher sets the
// connection's deadline at once and closes the connection (no cancel
// request, which a silent server would not answer either).
func Dial(ctx context.Context, c PoolConfig) (*pgxpool.Pool, error) {
	url, wait := c.URL, c.ConnectWait
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if c.MaxConns > 0 {
		cfg.MaxConns = c.MaxConns
	}
	conn := cfg.ConnConfig
	if conn.ConnectTimeout == 0 {
		conn.ConnectTimeout = defaultConnectTimeout
	}
	dialer := &net.Dialer{KeepAliveConfig: keepAlive}
	conn.DialFunc = dialer.DialContext
	if _, set := conn.RuntimeParams["jit"]; !set {
		// Every query here is a short OLTP one, but the planner's costs of
		// some reach jit_above_cost (a home feed over 10,000 followees
		// from PostgreSQL: 22 ms to run, 294 ms to JIT-compile first).
		conn.RuntimeParams["jit"] = "off"
	}
	if c.StatementTimeout > 0 {
		ms := strconv.FormatInt(c.StatementTimeout.Milliseconds(), 10)
		for _, param := range []string{"statement_timeout", "idle_in_transaction_session_timeout"} {
			if _, set := conn.RuntimeParams[param]; !set {
				conn.RuntimeParams[param] = ms
			}
		}
		if conn.Tracer == nil {
			conn.Tracer = statementDeadline{timeout: c.StatementTimeout + statementGrace}
		}
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	err = backoff.Retry(ctx, wait, func(ctx context.Context) error {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		err := pool.Ping(ctx)
		if isPermanent(err) {
			return backoff.Permanent(err)
		}
		return err
	})
	if err != nil {
		pool.Close()
		return nil, fmt.Errorf("connect to database: %w", err)
	}
	return pool, nil
}

// isPermanent tells errors that waiting will not fix (bad database name,
// bad credentials) from a server that is not up yet.
func isPermanent(err error) bool {
	return hasCode(err, pgerrcode.InvalidCatalogName, pgerrcode.InvalidAuthorizationSpecification, pgerrcode.InvalidPassword)
}

// IsDatabaseMissing reports whether err says the database does not exist.
func IsDatabaseMissing(err error) bool {
	return hasCode(err, pgerrcode.InvalidCatalogName)
}

// CreateDatabase creates the database named in url by connecting to the
// "postgres" maintenance database of the same server. It is a no-op when the
// database already exists.
func CreateDatabase(ctx context.Context, url string) error {
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		return fmt.Errorf("database url: %w", err)
	}
	name := cfg.Database
	cfg.Database = "postgres"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		return fmt.Errorf("connect to maintenance database: %w", err)
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize())
	if hasCode(err, pgerrcode.DuplicateDatabase, pgerrcode.UniqueViolation) { // or a concurrent create
		return nil
	}
	if err != nil {
		return fmt.Errorf("create database %s: %w", name, err)
	}
	return nil
}

// queryIDs runs a query of one bigint column on the primary and returns the
// column; errors are wrapped with what the query is for.
func (db *DB) queryIDs(ctx context.Context, what, sql string, args ...any) ([]int64, error) {
	rows, err := db.primary.Query(ctx, sql, args...)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("%s: %w", what, err)
	}
	return ids, nil
}
