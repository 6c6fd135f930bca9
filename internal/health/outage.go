package health

import (
	"context"
	"errors"
	"strings"
	"syscall"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/redis/go-redis/v9"
)

// IsOutage reports whether err is a dependency failing to serve — it
// refused or broke the connection, did not answer in time, is starting or
// stopping, turned the work away for a while, or the watch knows it down
// (a *DownError) — rather than a bug: what a
// retry later can fix, and an API answers with 503. PostgreSQL's and Redis's
// own such errors are told by their codes here, so that callers need not
// know the drivers.
func IsOutage(err error) bool {
	if err == nil {
		return false
	}
	var down *DownError
	if errors.As(err, &down) || errors.Is(err, context.DeadlineExceeded) || brokenConnection(err) ||
		errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ETIMEDOUT) ||
		errors.Is(err, syscall.EHOSTUNREACH) || errors.Is(err, syscall.ENETUNREACH) {
		return true
	}
	var connectErr *pgconn.ConnectError
	if errors.As(err, &connectErr) || pgconn.Timeout(err) || errors.Is(err, pgconn.ErrConnClosed) {
		return true
	}
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return postgresOutage(pgErr.Code)
	}
	return errors.Is(err, redis.ErrPoolTimeout) || errors.Is(err, redis.ErrPoolExhausted) || errors.Is(err, redis.ErrClosed) ||
		redis.IsLoadingError(err) || redis.IsReadOnlyError(err) || redis.IsClusterDownError(err) ||
		redis.IsTryAgainError(err) || redis.IsMasterDownError(err) || redis.IsMaxClientsError(err) ||
		redis.IsOOMError(err) || redis.IsNoReplicasError(err)
}

// postgresOutage reports whether a PostgreSQL error code says the server
// cannot serve now rather than that the statement is wrong: connection
// exceptions (class 08), insufficient resources (53), the server shutting
// down or starting (57P01-57P03), a statement or lock cut off by
// statement_timeout or lock_timeout (57014, 55P03), a standby where the
// primary was (25006, after a failover), and the conflicts a retry
// resolves (40001 serialization failure, 40P01 deadlock).
func postgresOutage(code string) bool {
	if strings.HasPrefix(code, "08") || strings.HasPrefix(code, "53") {
		return true
	}
	switch code {
	case "57P01", "57P02", "57P03", "57014", "55P03", "25006", "40001", "40P01":
		return true
	}
	return false
}
