// Package store is the PostgreSQL side of newsfeed: posts, follows and the
// outbox, through pgx. It is an adapter: it speaks domain's vocabulary and
// implements the small interfaces its users declare — the services (outbox,
// fanout, api), the operator console (admin) and the Redis adapter that
// caches feeds (feed.Store) — without importing any of them.
package store

import (
	"context"
	"fmt"
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
func Connect(ctx context.Context, url string, maxConns int32, wait time.Duration) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("database url: %w", err)
	}
	if maxConns > 0 {
		cfg.MaxConns = maxConns
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
