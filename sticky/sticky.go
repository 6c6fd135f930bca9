// Package sticky remembers, per user, how far the primary's write-ahead log
// had gone when that user's last write committed, so that the user's reads
// can pass over a replica that has not replayed it yet (read-your-writes, the
// "sticky" write location of GitLab's database load balancing). The positions
// live in Redis, so every serve process sees the writes made through the
// others: one small string per user, <prefix>lsn:{<user>}, hash-tagged by
// user like the user's feed keys, that expires TTL after the user's last
// write.
package sticky

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// TTL is how long a user's position is kept after their last write. Within
// it a replica that has not replayed the write is passed over for the
// primary; after it the user's reads go to the replica again, whatever its
// lag. A minute is far beyond a healthy replica's lag (milliseconds to a
// second or two), so the guarantee holds unless the replica is broken, and
// short enough that only the users who wrote in the last minute have a key.
const TTL = time.Minute

// Positions records and reads users' write positions in Redis.
type Positions struct {
	rdb    redis.UniversalClient
	prefix string
}

// New builds Positions over rdb, with every key behind prefix.
func New(rdb redis.UniversalClient, prefix string) *Positions {
	return &Positions{rdb: rdb, prefix: prefix}
}

// Key is the Redis key of user's position under prefix.
func Key(prefix string, user int64) string {
	return prefix + "lsn:{" + strconv.FormatInt(user, 10) + "}"
}

// recordScript keeps the greater of the stored position and ARGV[1], and
// restarts the TTL (ARGV[2], ms): two writes of one user committed in one
// order may record in the other. Positions are stored as 19-digit decimals,
// so that comparing the strings compares the numbers exactly (Lua's numbers
// are doubles, exact only below 2^53).
var recordScript = redis.NewScript(`
local pos = redis.call('GET', KEYS[1])
if not pos or pos < ARGV[1] then pos = ARGV[1] end
redis.call('SET', KEYS[1], pos, 'PX', ARGV[2])
return 1`)

// Record notes that user's write committed with the primary's log at or
// below lsn (a non-negative WAL position, in bytes). A lower lsn than the one
// recorded leaves it.
func (p *Positions) Record(ctx context.Context, user, lsn int64) error {
	if lsn < 0 {
		return fmt.Errorf("record write position: negative position %d", lsn)
	}
	err := recordScript.Run(ctx, p.rdb, []string{Key(p.prefix, user)}, fmt.Sprintf("%019d", lsn), TTL.Milliseconds()).Err()
	if err != nil {
		return fmt.Errorf("record write position: %w", err)
	}
	return nil
}

// Get returns the position recorded for user within the last TTL; found is
// false when there is none (the user wrote nothing lately). An error means
// Redis did not answer: the caller cannot tell.
func (p *Positions) Get(ctx context.Context, user int64) (lsn int64, found bool, err error) {
	v, err := p.rdb.Get(ctx, Key(p.prefix, user)).Result()
	if errors.Is(err, redis.Nil) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("read write position: %w", err)
	}
	lsn, err = strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, false, fmt.Errorf("read write position: %q: %w", v, err)
	}
	return lsn, true, nil
}
