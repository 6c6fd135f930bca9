package store

import (
	"context"
	"database/sql"
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"math"
	"path"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"

	"github.com/newsfeed/newsfeed/internal/backoff"
)

// The schema is the list of numbered SQL files under store/migrations,
// applied in order by goose and recorded in its table (goose_db_version).
// Migrations run on every deploy while the service serves, so:
//
//   - a database that has every migration runs nothing and locks no table:
//     it reads goose's table and stops;
//   - each migration runs in a transaction (all or nothing) under a short
//     lock_timeout, so that it never stalls the queries that would queue
//     behind a lock it waits for, unless its file says
//     `-- +goose NO TRANSACTION`: such a file builds indexes with CREATE
//     INDEX CONCURRENTLY, which lets reads and writes go on, statement by
//     statement, under a longer lock_timeout (its waits block nobody);
//   - a migration whose lock was not granted (55P03) or that deadlocked
//     (40P01) is tried again with backoff, for RetryFor, then Migrate fails
//     naming the file and the statement;
//   - before a migration runs, an INVALID index that it names (a concurrent
//     build that failed or was cancelled leaves one, maintained but never
//     used, which CREATE INDEX IF NOT EXISTS would take for done) is dropped
//     concurrently, so that the migration builds it again;
//   - goose's advisory lock (the one the unversioned migrate took, so that old
//     and new binaries of a rolling deploy take turns too) makes concurrent
//     migrations run one after the other: the second finds them applied.
//
// docs/MIGRATIONS.md says how to write one.
const (
	// DefaultMigrateLockTimeout bounds how long a statement of a migration in
	// a transaction (an ALTER TABLE takes ACCESS EXCLUSIVE) waits for a lock;
	// meanwhile the queries queued behind its request wait too.
	DefaultMigrateLockTimeout = 2 * time.Second
	// DefaultMigrateIndexLockTimeout bounds the waits of a NO TRANSACTION
	// migration's concurrent index builds, and of the drop of an INVALID
	// index: for their SHARE UPDATE EXCLUSIVE lock, for the writers of the
	// table and for every older snapshot of the database. These waits block
	// no reads or writes, so they may be longer; a query that outlasts it
	// costs the build, which is retried.
	DefaultMigrateIndexLockTimeout = 30 * time.Second
	// DefaultMigrateRetryFor is how long one migration is retried after lock
	// timeouts before Migrate gives up.
	DefaultMigrateRetryFor = 2 * time.Minute

	migrateMinBackoff = 100 * time.Millisecond
	migrateMaxBackoff = 5 * time.Second
	// migrateLockPoll is how often, in seconds (goose counts whole ones), a
	// migration asks again for the lock another one holds.
	migrateLockPoll = 1
)

// migrateLockID is the advisory lock that serializes concurrent migrations.
const migrateLockID = 0x6e6577736665 // "newsfe"

//go:embed migrations/*.sql
var migrationFiles embed.FS

// Migrations returns the migration files built into the binary
// (store/migrations).
func Migrations() fs.FS {
	sub, err := fs.Sub(migrationFiles, "migrations")
	if err != nil {
		panic(err) // the directory is embedded: cannot happen
	}
	return sub
}

// MigrateOptions tune MigrateWith; zero values mean the defaults.
type MigrateOptions struct {
	// LockTimeout is the lock_timeout of migrations that run in a
	// transaction (DefaultMigrateLockTimeout when 0).
	LockTimeout time.Duration
	// IndexLockTimeout is the lock_timeout of NO TRANSACTION migrations and
	// of the drops of INVALID indexes (DefaultMigrateIndexLockTimeout when 0).
	IndexLockTimeout time.Duration
	// RetryFor is how long a migration is retried after a lock timeout
	// (DefaultMigrateRetryFor when 0; negative: never retried).
	RetryFor time.Duration
	// Migrations are the files to apply (Migrations() when nil).
	Migrations fs.FS
}

func (o MigrateOptions) withDefaults() MigrateOptions {
	if o.LockTimeout <= 0 {
		o.LockTimeout = DefaultMigrateLockTimeout
	}
	if o.IndexLockTimeout <= 0 {
		o.IndexLockTimeout = DefaultMigrateIndexLockTimeout
	}
	if o.RetryFor == 0 {
		o.RetryFor = DefaultMigrateRetryFor
	}
	if o.Migrations == nil {
		o.Migrations = Migrations()
	}
	return o
}

// MigrateReport says what a migration did.
type MigrateReport struct {
	// Applied lists the migrations that ran, by file name, in order. Empty
	// when the database had them all.
	Applied []string
	// Dropped lists the INVALID indexes dropped so that the migration that
	// names them would build them again.
	Dropped []string
	// Retries counts migrations run again after a lock timeout.
	Retries int
}

// Migrate applies the migrations with the default options: see MigrateWith.
func Migrate(ctx context.Context, pool *pgxpool.Pool) error {
	_, err := MigrateWith(ctx, pool, MigrateOptions{})
	return err
}

// MigrateWith applies the migrations that the database has not applied, in
// order, each under the advisory lock; it changes nothing, and takes no lock
// on a table, when the database has them all. See the comment above
// DefaultMigrateLockTimeout for how.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, opts MigrateOptions) (MigrateReport, error) {
	var report MigrateReport
	opts = opts.withDefaults()
	// database/sql over the pool's connections: goose speaks it.
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	locker, err := lock.NewPostgresSessionLocker(
		lock.WithLockID(migrateLockID),
		// As long as ctx allows: the migration ahead may be building a big index.
		lock.WithLockTimeout(migrateLockPoll, math.MaxUint64))
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	s := &migrateSession{locker: locker, opts: opts, report: &report}
	p, err := goose.NewProvider(goose.DialectPostgres, db, opts.Migrations,
		goose.WithSessionLocker(s),
		goose.WithDisableGlobalRegistry(true),
		// goose names each statement before it runs it: an error names it too.
		goose.WithVerbose(true), goose.WithSlog(slog.New(statementLog{s})))
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	// Without the lock, which a current database never waits for. goose
	// refuses a file older than one applied (merged out of order), so the
	// pending ones are those after the highest applied.
	pending, err := p.HasPending(ctx)
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	if !pending {
		return report, nil
	}
	current, _, err := p.GetVersions(ctx)
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	for _, src := range p.ListSources() {
		if src.Version <= current {
			continue
		}
		m, err := readMigration(opts.Migrations, src)
		if err != nil {
			return report, fmt.Errorf("migrate: %w", err)
		}
		if err := s.retry(ctx, func() error { return s.apply(ctx, p, m) }); err != nil {
			return report, fmt.Errorf("migrate: %s: %w", m.name, err)
		}
	}
	return report, nil
}

// migrationFile is what the runner reads of a migration beside goose.
type migrationFile struct {
	version int64
	name    string // the file's name
	text    string
	inTx    bool
}

func readMigration(fsys fs.FS, src *goose.Source) (*migrationFile, error) {
	b, err := fs.ReadFile(fsys, src.Path)
	if err != nil {
		return nil, fmt.Errorf("read %s: %w", src.Path, err)
	}
	text := string(b)
	return &migrationFile{version: src.Version, name: path.Base(src.Path), text: text, inTx: !noTransaction(text)}, nil
}

// noTransaction reports whether a migration carries the annotation
// `-- +goose NO TRANSACTION`, read as goose reads annotations.
func noTransaction(text string) bool {
	for line := range strings.Lines(text) {
		if !strings.HasPrefix(line, "--") || !strings.Contains(line, "+goose") {
			continue
		}
		cmd := strings.Replace(strings.ReplaceAll(line, "--", ""), "+goose", "", 1)
		if strings.EqualFold(strings.TrimSpace(cmd), "NO TRANSACTION") {
			return true
		}
	}
	return false
}

// migrateSession runs the migrations through goose and prepares, under the
// advisory lock, each session goose runs one on: goose hands it to the
// session locker, which this wraps.
type migrateSession struct {
	locker lock.SessionLocker
	opts   MigrateOptions
	report *MigrateReport
	// next is the migration goose is about to run.
	next *migrationFile
	// statement is the last statement goose began; timeout the session's
	// lock_timeout.
	statement string
	timeout   time.Duration
}

// apply runs m unless another migration applied it meanwhile.
func (s *migrateSession) apply(ctx context.Context, p *goose.Provider, m *migrationFile) error {
	s.next, s.statement = m, ""
	_, err := p.ApplyVersion(ctx, m.version, true)
	if errors.Is(err, goose.ErrAlreadyApplied) {
		return nil
	}
	if err != nil {
		var named *stmtError
		if errors.As(err, &named) { // a statement of the session's preparation
			return named
		}
		if s.statement == "" {
			return err
		}
		return &stmtError{sql: s.statement, timeout: s.timeout, err: err}
	}
	s.report.Applied = append(s.report.Applied, m.name)
	return nil
}

// SessionLock takes the advisory lock on the session goose will run the
// next migration on, then sets it up for that migration: its lock_timeout,
// UTC (goose records when with now() in a timestamp without time zone), and
// no INVALID index that the migration names.
func (s *migrateSession) SessionLock(ctx context.Context, conn *sql.Conn) error {
	if err := s.locker.SessionLock(ctx, conn); err != nil {
		return err
	}
	if err := s.prepare(ctx, conn); err != nil {
		_ = s.SessionUnlock(context.WithoutCancel(ctx), conn)
		return err
	}
	return nil
}

func (s *migrateSession) prepare(ctx context.Context, conn *sql.Conn) error {
	if err := s.setLockTimeout(ctx, conn, s.opts.IndexLockTimeout); err != nil {
		return err
	}
	if err := s.dropInvalidIndexes(ctx, conn); err != nil {
		return err
	}
	timeout := s.opts.IndexLockTimeout
	if s.next.inTx {
		timeout = s.opts.LockTimeout
	}
	if err := s.setLockTimeout(ctx, conn, timeout); err != nil {
		return err
	}
	if _, err := conn.ExecContext(ctx, "SET TimeZone = 'UTC'"); err != nil {
		return fmt.Errorf("set TimeZone: %w", err)
	}
	return nil
}

// SessionUnlock gives the session back as it was, without the lock.
func (s *migrateSession) SessionUnlock(ctx context.Context, conn *sql.Conn) error {
	_, err := conn.ExecContext(ctx, "RESET lock_timeout")
	if err == nil {
		_, err = conn.ExecContext(ctx, "RESET TimeZone")
	}
	if err == nil {
		err = s.locker.SessionUnlock(ctx, conn)
	}
	if err != nil {
		// A closed session drops its locks and settings; the pool then
		// discards the connection.
		_ = conn.Raw(func(driverConn any) error {
			if c, ok := driverConn.(*stdlib.Conn); ok {
				return c.Conn().Close(ctx)
			}
			return nil
		})
	}
	return nil
}

// setLockTimeout sets the session's lock_timeout (whole milliseconds, at
// least 1: 0 would mean no timeout).
func (s *migrateSession) setLockTimeout(ctx context.Context, conn *sql.Conn, d time.Duration) error {
	ms := max(d.Milliseconds(), 1)
	if _, err := conn.ExecContext(ctx, fmt.Sprintf("SET lock_timeout = '%dms'", ms)); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	s.timeout = d
	return nil
}

// dropInvalidIndexes drops, concurrently, the INVALID indexes of the schema
// that the next migration names, except those a build is working on.
func (s *migrateSession) dropInvalidIndexes(ctx context.Context, conn *sql.Conn) error {
	rows, err := conn.QueryContext(ctx, `
SELECT c.relname FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid
JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE n.nspname = current_schema() AND NOT i.indisvalid
  AND NOT EXISTS (SELECT FROM pg_stat_progress_create_index p WHERE p.index_relid = i.indexrelid)
ORDER BY 1`)
	if err != nil {
		return fmt.Errorf("find INVALID indexes: %w", err)
	}
	var invalid []string
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return fmt.Errorf("find INVALID indexes: %w", err)
		}
		if strings.Contains(s.next.text, name) {
			invalid = append(invalid, name)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("find INVALID indexes: %w", err)
	}
	for _, name := range invalid {
		drop := "DROP INDEX CONCURRENTLY IF EXISTS " + quoteIdent(name) //nolint:gosec // a name from the catalog, quoted: DDL takes no parameters
		if _, err := conn.ExecContext(ctx, drop); err != nil {
			return &stmtError{sql: drop + " (an INVALID index, to build it again)", timeout: s.timeout, err: err}
		}
		s.report.Dropped = append(s.report.Dropped, name)
	}
	return nil
}

func quoteIdent(name string) string {
	return `"` + strings.ReplaceAll(name, `"`, `""`) + `"`
}

// retry runs step until it succeeds, fails otherwise than by a lock timeout,
// or has been retried for RetryFor — at least once: a first attempt may
// take longer than RetryFor on a slow machine, and one lock timeout is
// always worth one more try.
func (s *migrateSession) retry(ctx context.Context, step func() error) error {
	start := time.Now()
	wait := backoff.Doubling{Min: migrateMinBackoff, Max: migrateMaxBackoff}
	delay := wait.Next()
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || !isLockTimeout(err) {
			return err
		}
		spent := time.Since(start)
		if s.opts.RetryFor < 0 || attempt > 1 && spent+delay > s.opts.RetryFor {
			return fmt.Errorf("gave up after %s in %s: %w", attempts(attempt), spent.Round(time.Millisecond), err)
		}
		if !backoff.Sleep(ctx, delay) {
			return fmt.Errorf("stopped after %s: %w (%w)", attempts(attempt), err, ctx.Err())
		}
		s.report.Retries++
		delay = wait.Next()
	}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// isLockTimeout reports whether err is a lock wait that gave up (55P03,
// lock_not_available) or a deadlock (40P01): both pass if tried again later.
func isLockTimeout(err error) bool {
	return hasCode(err, pgerrcode.LockNotAvailable, pgerrcode.DeadlockDetected)
}

// stmtError names the statement that failed.
type stmtError struct {
	sql     string
	timeout time.Duration
	err     error
}

func (e *stmtError) Error() string {
	sql := strings.Join(strings.Fields(e.sql), " ")
	if len(sql) > 200 {
		sql = sql[:200] + "…"
	}
	// PostgreSQL's own words, without goose's wrapping; where in a DO
	// block, when it says.
	cause := e.err.Error()
	var pgErr *pgconn.PgError
	if errors.As(e.err, &pgErr) {
		cause = pgErr.Error()
		if pgErr.Where != "" {
			cause += " (" + strings.Join(strings.Fields(pgErr.Where), " ") + ")"
		}
	}
	if isLockTimeout(e.err) {
		return fmt.Sprintf("%s: lock not granted within lock_timeout %s: %s", sql, e.timeout, cause)
	}
	return fmt.Sprintf("%s: %s", sql, cause)
}

func (e *stmtError) Unwrap() error { return e.err }

// statementLog is goose's logger: it keeps the statement goose is about to
// run, so that an error can name it, and drops the rest.
type statementLog struct{ s *migrateSession }

func (h statementLog) Enabled(context.Context, slog.Level) bool { return true }

func (h statementLog) Handle(_ context.Context, r slog.Record) error {
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "statement" {
			h.s.statement = a.Value.String()
			return false
		}
		return true
	})
	return nil
}

func (h statementLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h statementLog) WithGroup(string) slog.Handler      { return h }

// MigrationState is one migration file and whether the database applied it.
type MigrationState struct {
	Version int64
	// Name is the file's name.
	Name    string
	Applied bool
	// AppliedAt is when, in UTC; zero while pending.
	AppliedAt time.Time
}

// MigrationStatus lists the migration files built into the binary, oldest
// first, each with whether and when the database applied it. It writes
// nothing and waits for no migration that is running.
func MigrationStatus(ctx context.Context, pool *pgxpool.Pool) ([]MigrationState, error) {
	db := stdlib.OpenDBFromPool(pool)
	defer db.Close()
	p, err := goose.NewProvider(goose.DialectPostgres, db, Migrations(), goose.WithDisableGlobalRegistry(true))
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	var versioned bool
	if err := pool.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", goose.DefaultTablename).Scan(&versioned); err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	var out []MigrationState
	if !versioned { // goose's Status would create its table
		for _, src := range p.ListSources() {
			out = append(out, MigrationState{Version: src.Version, Name: path.Base(src.Path)})
		}
		return out, nil
	}
	status, err := p.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	for _, st := range status {
		out = append(out, MigrationState{
			Version: st.Source.Version, Name: path.Base(st.Source.Path),
			Applied: st.State == goose.StateApplied, AppliedAt: st.AppliedAt.UTC(),
		})
	}
	return out, nil
}
