package store

import (
	"errors"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The driver's errors are read here and nowhere else in the adapter: the
// rest of store asks these questions, and returns domain errors
// (domain.ErrNotFound, …) to its callers, never a pgx one they must know.

// isNoRows reports whether a query that should return a row found none.
func isNoRows(err error) bool { return errors.Is(err, pgx.ErrNoRows) }

// hasCode reports whether err is a PostgreSQL error with one of codes
// (pgerrcode's names of SQLSTATEs).
func hasCode(err error, codes ...string) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && slices.Contains(codes, pgErr.Code)
}
