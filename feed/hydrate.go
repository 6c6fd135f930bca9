package feed

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/domain"
	"github.com/newsfeed/newsfeed/internal/logctx"
)

// tombstone is the post cache's value for a post that is deleted or missing.
const tombstone = "-"

// deleting is the post cache's value for a post whose delete is in flight
// (MarkDeleting): reads ask PostgreSQL, and do not cache what it says.
const deleting = "?"

// MarkDeleting marks, for a moment, the delete of postID in flight, before
// it commits: from its commit until ForgetPost writes the post's tombstone,
// PostgreSQL says the post is deleted and the post cache does not yet, and
// a read from each in turn would show the post gone, then back. While the
// mark stands, reads hydrate the post from PostgreSQL (cachePosts writes
// nothing over it); ForgetPost replaces it. Call undo if the delete did not
// commit; an undo that is never called leaves the mark to expire
// (deleteMarkTTL). An error (Redis down) leaves nothing to undo.
func (f *Feeds) MarkDeleting(ctx context.Context, postID int64) (undo func(), err error) {
	key := f.keys.post(postID)
	if err := f.rdb.Set(ctx, key, deleting, deleteMarkTTL).Err(); err != nil {
		return func() {}, fmt.Errorf("mark delete of post %d: %w", postID, err)
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Second)
		defer cancel()
		_ = unmarkDeleteScript.Run(ctx, f.rdb, []string{key}, deleting).Err() // it expires anyway
	}, nil
}

// deleteMarkTTL bounds a delete's mark: longer than any request lasts.
const deleteMarkTTL = 10 * time.Second

// hydrate turns post ids into posts, in the same order, dropping deleted
// ones: one round trip to the post cache, and one to PostgreSQL when it
// misses any. The cache's answers are of one moment and PostgreSQL's of a
// later one: a post the cache had, deleted before one it lacked, would
// show beside the gap of the other — a page of no moment. So PostgreSQL,
// when asked, is asked for every post the cache did not say is deleted,
// and the page is as of its answer.
func (f *Feeds) hydrate(ctx context.Context, ids []int64) ([]domain.Post, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	cmds := make([]*redis.StringCmd, len(ids))
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, id := range ids {
			cmds[i] = p.Get(ctx, f.keys.post(id))
		}
		return nil
	})
	if err != nil && !isNil(err) {
		return nil, fmt.Errorf("hydrate posts: %w", err)
	}
	found := make(map[int64]domain.Post, len(ids))
	dead := make(map[int64]bool)
	var missing, alive []int64 // alive: what the cache did not say is deleted
	for i, c := range cmds {
		raw, err := c.Bytes()
		switch {
		case err == nil && string(raw) == tombstone:
			dead[ids[i]] = true
			continue
		case err != nil || len(raw) == 0 || raw[0] != '{':
			missing = append(missing, ids[i])
		default:
			found[ids[i]] = domain.Post{ID: ids[i], JSON: raw}
		}
		alive = append(alive, ids[i])
	}
	if len(missing) > 0 {
		posts, err := f.store.PostsByID(ctx, alive)
		if err != nil {
			return nil, fmt.Errorf("hydrate posts: %w", err)
		}
		clear(found)
		for _, p := range posts {
			found[p.ID] = p
		}
		fetched := make([]domain.Post, 0, len(missing))
		for _, id := range missing {
			if p, ok := found[id]; ok {
				fetched = append(fetched, p)
			}
		}
		f.cachePosts(ctx, fetched, missing, found)
	}
	out := make([]domain.Post, 0, len(ids))
	for _, id := range ids {
		if p, ok := found[id]; ok && !dead[id] {
			out = append(out, p)
		}
	}
	return out, nil
}

// cachePosts stores posts in the post cache, and tombstones for the ids among
// wanted that PostgreSQL did not return. A cache write that fails only costs
// a PostgreSQL read later, so it is logged, not returned.
func (f *Feeds) cachePosts(ctx context.Context, posts []domain.Post, wanted []int64, found map[int64]domain.Post) {
	if len(posts) == 0 && len(wanted) == 0 {
		return
	}
	_, err := f.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for _, post := range posts {
			// SETNX: never over a tombstone, which a delete may have
			// written after these posts were read.
			if raw, err := json.Marshal(post); err == nil {
				p.SetNX(ctx, f.keys.post(post.ID), raw, f.cfg.PostTTL)
			}
		}
		for _, id := range wanted {
			if _, ok := found[id]; !ok {
				p.SetNX(ctx, f.keys.post(id), tombstone, f.cfg.PostTTL)
			}
		}
		return nil
	})
	if err != nil && ctx.Err() == nil {
		logctx.From(ctx, f.log).Warn("post cache write failed", zap.Error(err))
	}
}
