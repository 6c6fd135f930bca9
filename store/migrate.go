package store

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/newsfeed/newsfeed/internal/backoff"
)

// Migrations run on every deploy while the service serves, so a migration of
// a current schema must change nothing and lock no table, and one that does
// change something must never queue a strong lock behind a long query (every
// query on the table would queue behind it in turn). So Migrate:
//
//   - splits the schema into statements and checks each against the catalog
//     first, skipping those already satisfied: a relation that exists, a
//     column that exists, a sequence already owned, a valid index. The checks
//     read only catalogs (to_regclass takes no lock on the relation it names);
//   - runs what is left in one transaction (all or nothing), except indexes on
//     tables that existed before this migration: those are built afterwards
//     with CREATE INDEX CONCURRENTLY, which lets reads and writes go on, and an
//     INVALID index that a failed concurrent build left is dropped
//     (concurrently) and built again;
//   - runs every statement under a lock_timeout and retries a step whose lock
//     was not granted (55P03) or that deadlocked (40P01), with backoff, for
//     RetryFor, then fails naming the statement;
//   - holds an advisory lock throughout, so that concurrent migrations run one
//     after the other (the second finds the schema current).
//
// A statement of a form Migrate does not know runs on every migration, in the
// transaction: schema.sql uses only the known forms (a test checks that a
// current schema runs nothing).
const (
	// DefaultMigrateLockTimeout bounds how long a statement of the
	// transaction (an ALTER TABLE takes ACCESS EXCLUSIVE) waits for its lock;
	// meanwhile the queries queued behind its request wait too.
	DefaultMigrateLockTimeout = 2 * time.Second
	// DefaultMigrateIndexLockTimeout bounds the waits of a concurrent index
	// build: for its SHARE UPDATE EXCLUSIVE lock, for the writers of the
	// table and for every older snapshot of the database. These waits block
	// no reads or writes, so they may be longer; a query that outlasts it
	// costs the build, which is retried.
	DefaultMigrateIndexLockTimeout = 30 * time.Second
	// DefaultMigrateRetryFor is how long one step (the transaction, or one
	// index build) is retried after lock timeouts before Migrate gives up.
	DefaultMigrateRetryFor = 2 * time.Minute

	migrateMinBackoff = 100 * time.Millisecond
	migrateMaxBackoff = 5 * time.Second
)

// migrateLockID is the advisory lock that serializes concurrent migrations.
const migrateLockID = 0x6e6577736665 // "newsfe"

// MigrateOptions tune MigrateWith; zero values mean the defaults.
type MigrateOptions struct {
	// LockTimeout is the lock_timeout of the transactional statements
	// (DefaultMigrateLockTimeout when 0).
	LockTimeout time.Duration
	// IndexLockTimeout is the lock_timeout of concurrent index builds and
	// drops (DefaultMigrateIndexLockTimeout when 0).
	IndexLockTimeout time.Duration
	// RetryFor is how long a step is retried after a lock timeout
	// (DefaultMigrateRetryFor when 0; negative: never retried).
	RetryFor time.Duration
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
	return o
}

// MigrateReport says what a migration did.
type MigrateReport struct {
	// Applied lists the statements that ran, in order, as they ran (index
	// builds on existing tables with CONCURRENTLY). Empty when the schema
	// was current.
	Applied []string
	// Retries counts steps run again after a lock timeout.
	Retries int
}

// Migrate applies schema with the default options: see MigrateWith.
func Migrate(ctx context.Context, pool *pgxpool.Pool, schema string) error {
	_, err := MigrateWith(ctx, pool, schema, MigrateOptions{})
	return err
}

// MigrateWith applies schema, a script of SQL statements, under an advisory
// lock; it changes nothing, and takes no lock on a table, when the schema is
// current. See the comment above DefaultMigrateLockTimeout for how.
func MigrateWith(ctx context.Context, pool *pgxpool.Pool, schema string, opts MigrateOptions) (MigrateReport, error) {
	var report MigrateReport
	stmts, err := parseSchema(schema)
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	defer conn.Release()
	// The advisory lock waits as long as ctx allows, without lock_timeout:
	// the migration ahead may be building a big index.
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", migrateLockID); err != nil {
		return report, fmt.Errorf("migrate: take lock: %w", err)
	}
	defer func() {
		// On a fresh context: the lock must go even if ctx was cancelled, and
		// the connection goes back to the pool without the lock_timeout.
		cleanupCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_, err := conn.Exec(cleanupCtx, "RESET lock_timeout")
		if err == nil {
			_, err = conn.Exec(cleanupCtx, "SELECT pg_advisory_unlock($1)", migrateLockID)
		}
		if err != nil {
			conn.Conn().Close(cleanupCtx) // a closed session drops its locks and settings
		}
	}()
	m := &migrator{conn: conn.Conn(), opts: opts.withDefaults(), report: &report}
	var deferred []*statement
	err = m.retry(ctx, func() error {
		var err error
		deferred, err = m.applyInTx(ctx, stmts)
		return err
	})
	if err != nil {
		return report, fmt.Errorf("migrate: %w", err)
	}
	for _, s := range deferred {
		if err := m.retry(ctx, func() error { return m.buildIndex(ctx, s) }); err != nil {
			return report, fmt.Errorf("migrate: %w", err)
		}
	}
	return report, nil
}

type migrator struct {
	conn   *pgx.Conn
	opts   MigrateOptions
	report *MigrateReport
	// timeout is the lock_timeout the session has now.
	timeout time.Duration
}

// stmtError names the statement that failed.
type stmtError struct {
	sql     string
	timeout time.Duration
	err     error
}

func (e *stmtError) Error() string {
	sql := e.sql
	if len(sql) > 200 {
		sql = sql[:200] + "…"
	}
	if isLockTimeout(e.err) {
		return fmt.Sprintf("%s: lock not granted within lock_timeout %s: %v", sql, e.timeout, e.err)
	}
	return fmt.Sprintf("%s: %v", sql, e.err)
}

func (e *stmtError) Unwrap() error { return e.err }

func (m *migrator) fail(sql string, err error) error {
	return &stmtError{sql: sql, timeout: m.timeout, err: err}
}

// isLockTimeout reports whether err is a lock wait that gave up (55P03,
// lock_not_available) or a deadlock (40P01): both pass if tried again later.
func isLockTimeout(err error) bool {
	return hasCode(err, pgerrcode.LockNotAvailable, pgerrcode.DeadlockDetected)
}

// retry runs step until it succeeds, fails otherwise than by a lock timeout,
// or has been retried for RetryFor.
func (m *migrator) retry(ctx context.Context, step func() error) error {
	start := time.Now()
	wait := backoff.Doubling{Min: migrateMinBackoff, Max: migrateMaxBackoff}
	delay := wait.Next()
	for attempt := 1; ; attempt++ {
		err := step()
		if err == nil || !isLockTimeout(err) {
			return err
		}
		spent := time.Since(start)
		if m.opts.RetryFor < 0 || spent+delay > m.opts.RetryFor {
			return fmt.Errorf("gave up after %s in %s: %w", attempts(attempt), spent.Round(time.Millisecond), err)
		}
		if !backoff.Sleep(ctx, delay) {
			return fmt.Errorf("stopped after %s: %w (%w)", attempts(attempt), err, ctx.Err())
		}
		m.report.Retries++
		delay = wait.Next()
	}
}

func attempts(n int) string {
	if n == 1 {
		return "1 attempt"
	}
	return fmt.Sprintf("%d attempts", n)
}

// setLockTimeout sets the session's lock_timeout (whole milliseconds, at
// least 1: 0 would mean no timeout).
func (m *migrator) setLockTimeout(ctx context.Context, d time.Duration) error {
	if m.timeout == d {
		return nil
	}
	ms := max(d.Milliseconds(), 1)
	if _, err := m.conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = '%dms'", ms)); err != nil {
		return fmt.Errorf("set lock_timeout: %w", err)
	}
	m.timeout = d
	return nil
}

// applyInTx runs, in one transaction, the statements the catalog does not
// show applied yet, and returns the indexes to build concurrently after it.
func (m *migrator) applyInTx(ctx context.Context, stmts []*statement) (deferred []*statement, err error) {
	if err := m.setLockTimeout(ctx, m.opts.LockTimeout); err != nil {
		return nil, err
	}
	tx, err := m.conn.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("begin: %w", err)
	}
	defer func() {
		if err != nil {
			_ = tx.Rollback(ctx)
		}
	}()
	var applied []string
	created := map[uint32]bool{} // tables this transaction created
	for _, s := range stmts {
		done, err := s.applied(ctx, tx)
		if err != nil {
			return nil, m.fail(s.sql, fmt.Errorf("check the catalog: %w", err))
		}
		if done {
			continue
		}
		if s.kind == kindIndex {
			var table uint32
			if err := tx.QueryRow(ctx, "SELECT coalesce(to_regclass($1)::oid, 0)", s.table).Scan(&table); err != nil {
				return nil, m.fail(s.sql, fmt.Errorf("check the catalog: %w", err))
			}
			if table != 0 && !created[table] {
				// The table has rows and readers: build it concurrently, later.
				// (A missing table fails here, in the transaction.)
				deferred = append(deferred, s)
				continue
			}
			// A table created in this transaction is seen by nobody else yet:
			// its index is built here, all or nothing with it.
		}
		if _, err := tx.Exec(ctx, s.sql); err != nil {
			return nil, m.fail(s.sql, err)
		}
		applied = append(applied, s.sql)
		if s.kind == kindCreateTable {
			var oid uint32
			if err := tx.QueryRow(ctx, "SELECT coalesce(to_regclass($1)::oid, 0)", s.name).Scan(&oid); err != nil {
				return nil, m.fail(s.sql, fmt.Errorf("check the catalog: %w", err))
			}
			created[oid] = true
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return nil, fmt.Errorf("commit: %w", err)
	}
	m.report.Applied = append(m.report.Applied, applied...)
	return deferred, nil
}

// buildIndex builds an index on an existing table concurrently, after
// dropping an INVALID one of the same name (a concurrent build that failed
// or was cancelled leaves one behind, which is maintained but never used).
func (m *migrator) buildIndex(ctx context.Context, s *statement) error {
	if err := m.setLockTimeout(ctx, m.opts.IndexLockTimeout); err != nil {
		return err
	}
	var valid *bool
	err := m.conn.QueryRow(ctx, "SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)", s.name).Scan(&valid)
	if err != nil && !isNoRows(err) {
		return m.fail(s.concurrently, fmt.Errorf("check the catalog: %w", err))
	}
	if valid != nil && *valid {
		return nil
	}
	if valid != nil {
		drop := "DROP INDEX CONCURRENTLY IF EXISTS " + s.name
		if _, err := m.conn.Exec(ctx, drop); err != nil {
			return m.fail(drop+" (an INVALID index, to build it again)", err)
		}
		m.report.Applied = append(m.report.Applied, drop)
	}
	if _, err := m.conn.Exec(ctx, s.concurrently); err != nil {
		return m.fail(s.concurrently, err)
	}
	m.report.Applied = append(m.report.Applied, s.concurrently)
	return nil
}

type stmtKind int

const (
	kindOther       stmtKind = iota // run on every migration
	kindCreateTable                 // CREATE TABLE IF NOT EXISTS name
	kindCreateSeq                   // CREATE SEQUENCE IF NOT EXISTS name
	kindAddColumn                   // ALTER TABLE table ADD COLUMN IF NOT EXISTS column (one action)
	kindOwnedBy                     // ALTER SEQUENCE name OWNED BY table.column
	kindIndex                       // CREATE [UNIQUE] INDEX IF NOT EXISTS name ON table
)

// statement is one statement of the schema, with what its catalog check needs.
type statement struct {
	sql    string // comments removed, whitespace collapsed
	kind   stmtKind
	name   string // the relation the statement creates or alters, for to_regclass
	table  string // the table of a column or an index, for to_regclass
	column string // the column, as pg_attribute.attname spells it
	// concurrently is an index's statement with CONCURRENTLY.
	concurrently string
}

// applied reports whether the catalog shows the statement applied.
func (s *statement) applied(ctx context.Context, tx pgx.Tx) (bool, error) {
	var ok bool
	var err error
	switch s.kind {
	case kindCreateTable, kindCreateSeq:
		err = tx.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", s.name).Scan(&ok)
	case kindAddColumn:
		err = tx.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_attribute
               WHERE attrelid = to_regclass($1) AND attname = $2 AND attnum > 0 AND NOT attisdropped)`,
			s.table, s.column).Scan(&ok)
	case kindOwnedBy:
		err = tx.QueryRow(ctx, `
SELECT EXISTS (SELECT 1 FROM pg_depend d
               JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
               WHERE d.classid = 'pg_class'::regclass AND d.objid = to_regclass($1)
                 AND d.refclassid = 'pg_class'::regclass AND d.refobjid = to_regclass($2)
                 AND a.attname = $3 AND d.deptype = 'a')`,
			s.name, s.table, s.column).Scan(&ok)
	case kindIndex:
		err = tx.QueryRow(ctx, "SELECT EXISTS (SELECT 1 FROM pg_index WHERE indexrelid = to_regclass($1) AND indisvalid)",
			s.name).Scan(&ok)
	}
	return ok, err
}

const (
	identRE     = `(?:"(?:[^"]|"")+"|[A-Za-z_][A-Za-z0-9_$]*)`
	qualifiedRE = `(?:(` + identRE + `)\.)?(` + identRE + `)` // two groups: schema, name
)

var (
	createRelRE = regexp.MustCompile(`(?i)^CREATE (TABLE|SEQUENCE) IF NOT EXISTS (` + qualifiedRE + `)(?:[ (]|$)`)
	addColumnRE = regexp.MustCompile(`(?i)^ALTER TABLE (?:IF EXISTS )?(?:ONLY )?(` + qualifiedRE + `) ADD (?:COLUMN )?IF NOT EXISTS (` + identRE + `) (.*)$`)
	ownedByRE   = regexp.MustCompile(`(?i)^ALTER SEQUENCE (?:IF EXISTS )?(` + qualifiedRE + `) OWNED BY (` + qualifiedRE + `)\.(` + identRE + `)$`)
	indexRE     = regexp.MustCompile(`(?i)^(CREATE (?:UNIQUE )?INDEX) (IF NOT EXISTS (` + identRE + `) ON (` + qualifiedRE + `)[ (].*)$`)
)

// parseSchema splits a script into statements and recognizes the forms
// whose effect the catalog can confirm.
func parseSchema(schema string) ([]*statement, error) {
	sqls, err := splitSQL(schema)
	if err != nil {
		return nil, err
	}
	stmts := make([]*statement, 0, len(sqls))
	for _, sql := range sqls {
		s := &statement{sql: sql, kind: kindOther}
		if g := createRelRE.FindStringSubmatch(sql); g != nil {
			s.kind, s.name = kindCreateTable, g[2]
			if strings.EqualFold(g[1], "SEQUENCE") {
				s.kind = kindCreateSeq
			}
		} else if g := addColumnRE.FindStringSubmatch(sql); g != nil && !hasTopLevelComma(g[5]) {
			s.kind, s.table, s.column = kindAddColumn, g[1], identName(g[4])
			s.name = s.table
		} else if g := ownedByRE.FindStringSubmatch(sql); g != nil {
			s.kind, s.name, s.table, s.column = kindOwnedBy, g[1], g[4], identName(g[7])
		} else if g := indexRE.FindStringSubmatch(sql); g != nil {
			s.kind, s.table = kindIndex, g[4]
			s.name = g[3]
			if g[5] != "" { // an index lives in its table's schema
				s.name = g[5] + "." + g[3]
			}
			s.concurrently = g[1] + " CONCURRENTLY " + g[2]
		}
		stmts = append(stmts, s)
	}
	return stmts, nil
}

// identName is how the catalog spells an identifier: unquoted ones fold to
// lower case, quoted ones are taken as written.
func identName(ident string) string {
	if strings.HasPrefix(ident, `"`) {
		return strings.ReplaceAll(ident[1:len(ident)-1], `""`, `"`)
	}
	return strings.ToLower(ident)
}

// hasTopLevelComma reports whether s (the tail of a normalized statement)
// has a comma outside parentheses and quotes: an ALTER TABLE of several
// actions, which one catalog check cannot confirm.
func hasTopLevelComma(s string) bool {
	depth := 0
	var quote byte
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case quote != 0:
			if c == quote {
				quote = 0
			}
		case c == '\'' || c == '"':
			quote = c
		case c == '(':
			depth++
		case c == ')':
			depth--
		case c == ',' && depth == 0:
			return true
		}
	}
	return false
}

var dollarTagRE = regexp.MustCompile(`^\$(?:[A-Za-z_][A-Za-z0-9_]*)?\$`)

// splitSQL splits a script at the semicolons that end statements, as psql
// does: not inside quotes, quoted identifiers, dollar quotes or comments. It
// returns each statement without its comments and with runs of whitespace
// outside literals collapsed to one space.
func splitSQL(src string) ([]string, error) {
	var out []string
	var b strings.Builder
	space := false // whitespace (or a comment) seen since the last token
	write := func(s string) {
		if space && b.Len() > 0 {
			b.WriteByte(' ')
		}
		space = false
		b.WriteString(s)
	}
	isIdent := func(c byte) bool {
		return c == '_' || c == '$' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= 0x80
	}
	for i := 0; i < len(src); {
		c := src[i]
		switch {
		case c == '-' && strings.HasPrefix(src[i:], "--"):
			end := strings.IndexByte(src[i:], '\n')
			if end < 0 {
				end = len(src) - i
			}
			i += end
			space = true
		case c == '/' && strings.HasPrefix(src[i:], "/*"):
			depth, j := 1, i+2 // PostgreSQL's block comments nest
			for depth > 0 {
				if j >= len(src) {
					return nil, fmt.Errorf("schema: unterminated /* comment")
				}
				switch {
				case strings.HasPrefix(src[j:], "/*"):
					depth, j = depth+1, j+2
				case strings.HasPrefix(src[j:], "*/"):
					depth, j = depth-1, j+2
				default:
					j++
				}
			}
			i = j
			space = true
		case c == '\'':
			// An E'…' string takes backslash escapes.
			cur := b.String()
			escapes := !space && len(cur) > 0 && (cur[len(cur)-1] == 'E' || cur[len(cur)-1] == 'e') &&
				(len(cur) == 1 || !isIdent(cur[len(cur)-2]))
			j := closingQuote(src, i, escapes)
			if j < 0 {
				return nil, fmt.Errorf("schema: unterminated quoted string")
			}
			write(src[i : j+1])
			i = j + 1
		case c == '"':
			j := closingQuote(src, i, false)
			if j < 0 {
				return nil, fmt.Errorf("schema: unterminated quoted identifier")
			}
			write(src[i : j+1])
			i = j + 1
		case c == '$' && (i == 0 || !isIdent(src[i-1])) && dollarTagRE.MatchString(src[i:]):
			tag := dollarTagRE.FindString(src[i:])
			end := strings.Index(src[i+len(tag):], tag)
			if end < 0 {
				return nil, fmt.Errorf("schema: unterminated dollar-quoted string %s", tag)
			}
			j := i + len(tag) + end + len(tag)
			write(src[i:j])
			i = j
		case c == ';':
			if b.Len() > 0 {
				out = append(out, b.String())
			}
			b.Reset()
			space = false
			i++
		case c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v':
			space = true
			i++
		default:
			write(src[i : i+1])
			i++
		}
	}
	if b.Len() > 0 {
		out = append(out, b.String())
	}
	return out, nil
}

// closingQuote returns the index of the quote that closes the string or
// identifier whose opening quote is src[i] (' or "): a doubled quote stands
// for itself and, with escapes (E'…'), a backslash takes the next byte
// along. It returns -1 when nothing closes it.
func closingQuote(src string, i int, escapes bool) int {
	q := src[i]
	for j := i + 1; j < len(src); j++ {
		switch {
		case escapes && src[j] == '\\':
			j++
		case src[j] == q && j+1 < len(src) && src[j+1] == q:
			j++
		case src[j] == q:
			return j
		}
	}
	return -1
}
