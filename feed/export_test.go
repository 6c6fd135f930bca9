package feed

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

// WriteBuilding writes in userID's feed under prefix what a rebuild writes
// while it reads PostgreSQL, with a token of its own: tests write it to
// stand for another reader's rebuild, stuck or crashed.
func WriteBuilding(ctx context.Context, rdb redis.UniversalClient, prefix string, userID int64, ttl time.Duration) error {
	set := keys{prefix}.feedSet(userID)
	h := header{flags: flagBuilding, token: buildToken()}
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Set(ctx, set.meta, h.meta(), ttl)
		p.Set(ctx, set.head, h.head(), ttl)
		return nil
	})
	return err
}

// Settings is the configuration f runs with, its defaults filled in.
func (f *Feeds) Settings() Config { return f.cfg }
