package store

import (
	"context"
	"fmt"

	"github.com/newsfeed/newsfeed/domain"
)

// What a home feed holds (docs/API.md): the entries — posts and reposts —
// of the reader and of the people they follow, without those whose author,
// or whose original's author, the reader hides (mutes, or a block either
// way), each original once: as its entry with the lowest id. The queries
// below say it in SQL; the Redis feeds hold the entries unfiltered and
// feed.Feeds filters them at read time by the same rules.

// feedSourcesSQL are the CTEs every home-feed query starts with: hidden,
// the users $1 hides; sources, the authors whose entries $1 sees (themself
// and the followees they do not hide).
const feedSourcesSQL = `
WITH hidden AS (
    SELECT muted_id AS id FROM mutes WHERE user_id = $1
    UNION SELECT blocked_id FROM blocks WHERE blocker_id = $1
    UNION SELECT blocker_id FROM blocks WHERE blocked_id = $1
), sources AS (
    SELECT $1::bigint AS id
    UNION ALL
    SELECT followee_id FROM follows WHERE follower_id = $1 AND followee_id NOT IN (SELECT id FROM hidden)
)`

// shownSQL is true for the entry p (a row of posts, live, by a source) that
// the feed shows: a post, or a repost whose original's author is not
// hidden and which is the first live entry of its original among the
// sources' (the original itself, or an earlier repost), and is not deleted.
const shownSQL = `(p.repost_of IS NULL OR (
    NOT EXISTS (SELECT 1 FROM posts o WHERE o.id = p.repost_of AND (o.deleted_at IS NOT NULL
                OR o.author_id IN (SELECT id FROM hidden) OR o.author_id IN (SELECT id FROM sources)))
    AND NOT EXISTS (SELECT 1 FROM posts e WHERE e.repost_of = p.repost_of AND e.id < p.id
                    AND e.deleted_at IS NULL AND e.author_id IN (SELECT id FROM sources))))`

// FolloweePosts returns up to limit entries with id < before of
// followerID's home feed, newest first, as the contract defines it: the
// truth that a home feed caches, and what a read takes from PostgreSQL.
// Each source contributes at most limit entries through the (author_id, id)
// index, so the cost grows with the number of followees, not of their posts.
func (db *DB) FolloweePosts(ctx context.Context, followerID, before int64, limit int) ([]domain.Post, error) {
	rows, err := db.primary.Query(ctx, feedSourcesSQL+`
SELECT `+postColumns+`
FROM sources s
CROSS JOIN LATERAL (
    SELECT p.* FROM posts p
    WHERE p.author_id = s.id AND p.id < $2 AND p.deleted_at IS NULL AND `+shownSQL+`
    ORDER BY p.id DESC LIMIT $3
) p
LEFT JOIN posts o ON o.id = p.repost_of
ORDER BY p.id DESC LIMIT $3`, followerID, before, limit)
	if err != nil {
		return nil, fmt.Errorf("followee posts: %w", err)
	}
	return collectPosts(rows)
}

// FeedEntries returns the newest limit entries that a Redis feed of userID
// holds: every live post and repost of the user and of the people they
// follow, unfiltered (reads filter them), so that an unmute or an unblock
// shows what it hid without a merge.
func (db *DB) FeedEntries(ctx context.Context, userID int64, limit int) ([]domain.Post, error) {
	rows, err := db.primary.Query(ctx, `
WITH sources AS (
    SELECT $1::bigint AS id UNION ALL SELECT followee_id FROM follows WHERE follower_id = $1
)
SELECT `+postColumns+`
FROM sources s
CROSS JOIN LATERAL (
    SELECT * FROM posts WHERE author_id = s.id AND deleted_at IS NULL ORDER BY id DESC LIMIT $2
) p
LEFT JOIN posts o ON o.id = p.repost_of
ORDER BY p.id DESC LIMIT $2`, userID, limit)
	if err != nil {
		return nil, fmt.Errorf("feed entries: %w", err)
	}
	return collectPosts(rows)
}

// visibleEntrySQL is true for the entry e that userID $1 sees, given the
// users their feed hides ($3): live, by them or by someone they follow, by
// nobody hidden.
const visibleEntrySQL = `e.deleted_at IS NULL AND e.author_id <> ALL($3::bigint[])
    AND (e.author_id = $1 OR EXISTS (SELECT 1 FROM follows f WHERE f.follower_id = $1 AND f.followee_id = e.author_id))`

// Repeats returns, of reposts (the reposts of page, post ids a Redis feed
// gave), those userID's home feed does not show although it holds them —
// an earlier entry of the same original shows: the original itself, or an
// earlier repost — by the users the reader hides as the caller read them
// (its Redis feed's list) and whom the reader follows now; and of page, the
// posts deleted by now. The caller read the page before this query: a
// delete that committed between the two changes which entry of an
// original shows (a deleted original takes its reposts with it), so the
// page is kept as of this query, without what is deleted. One query a
// page, and only for pages that hold reposts; kept simple, since it runs
// on the read path (the caller checks the graph did not move meanwhile).
// The two halves are one statement, so one snapshot; the repeats' half
// looks only at the reposts, since over a whole page PostgreSQL plans its
// EXISTS as a hash of every live post.
func (db *DB) Repeats(ctx context.Context, userID int64, hides, reposts, page []int64) (repeats, deleted map[int64]bool, err error) {
	if hides == nil {
		hides = []int64{}
	}
	rows, err := db.primary.Query(ctx, `
SELECT p.id, p.deleted_at IS NOT NULL, false FROM posts p WHERE p.id = ANY($4)
UNION ALL
SELECT p.id, false, true FROM posts p
WHERE p.id = ANY($2) AND p.repost_of IS NOT NULL AND p.deleted_at IS NULL
  AND (EXISTS (SELECT 1 FROM posts e WHERE e.id = p.repost_of AND `+visibleEntrySQL+`)
       OR EXISTS (SELECT 1 FROM posts e WHERE e.repost_of = p.repost_of AND e.id < p.id AND `+visibleEntrySQL+`))`,
		userID, reposts, hides, page)
	if err != nil {
		return nil, nil, fmt.Errorf("repeated reposts: %w", err)
	}
	defer rows.Close()
	repeats, deleted = make(map[int64]bool), make(map[int64]bool, len(page))
	for _, id := range page {
		deleted[id] = true // until its row says otherwise: a purged post is no row
	}
	for rows.Next() {
		var id int64
		var gone, repeat bool
		if err := rows.Scan(&id, &gone, &repeat); err != nil {
			return nil, nil, fmt.Errorf("repeated reposts: %w", err)
		}
		switch {
		case repeat:
			repeats[id] = true
		case !gone:
			delete(deleted, id)
		}
	}
	if err := rows.Err(); err != nil {
		return nil, nil, fmt.Errorf("repeated reposts: %w", err)
	}
	return repeats, deleted, nil
}
