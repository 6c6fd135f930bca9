// Package feed is the home feed: a Redis sorted set per user with the ids of
// the posts pushed to them (member = score = post id, so a second push of the
// same post changes nothing), trimmed to feed.max_len, read newest first and
// hydrated from a post cache with PostgreSQL behind it. Reading past what
// Redis keeps, and rebuilding a feed Redis lost, go to PostgreSQL.
//
// A feed key holds one marker at rank 0 besides the post ids:
//
//	"0"  (score 0)  the feed is complete: it has every recent post
//	"-1" (score -1) a rebuild is filling it
//
// Writers push only into feeds that exist, so a feed that Redis lost, or that
// was never read, costs nothing until its owner reads it and it is rebuilt.
// A rebuild first adds the "-1" placeholder so that pushes made while it
// reads PostgreSQL land in the feed too, and swaps it for "0" at the end.
package feed

import "strconv"

const (
	completeMarker = "0"
	buildingMarker = "-1"
)

// keys names every Redis key this package uses. Keys of one user share the
// hash tag {id}, so they live on one Redis Cluster slot.
type keys struct{ prefix string }

func (k keys) feed(userID int64) string {
	return k.prefix + "feed:{" + strconv.FormatInt(userID, 10) + "}"
}

func (k keys) rebuildLock(userID int64) string {
	return k.prefix + "feedlock:{" + strconv.FormatInt(userID, 10) + "}"
}

func (k keys) timeline(authorID int64) string {
	return k.prefix + "timeline:{" + strconv.FormatInt(authorID, 10) + "}"
}

func (k keys) timelineLock(authorID int64) string {
	return k.prefix + "timelinelock:{" + strconv.FormatInt(authorID, 10) + "}"
}

func (k keys) celebrities(userID int64) string {
	return k.prefix + "celebs:{" + strconv.FormatInt(userID, 10) + "}"
}

func (k keys) post(postID int64) string {
	return k.prefix + "post:" + strconv.FormatInt(postID, 10)
}
