// Package feed is the home feed: a compact set per user in Redis with the
// ids of the posts pushed to them — each read once, whatever order and
// however often pushes brought them —, trimmed to feed.max_len, read
// newest first and hydrated from a post cache with PostgreSQL behind it. Reading past what
// Redis keeps, and rebuilding a feed Redis lost, go to PostgreSQL.
//
// # Sets
//
// A feed (and a celebrity's timeline, which works the same way) is stored
// compactly, in two strings and a list (see encoding.go), with flags in its
// meta key:
//
//	complete  a newest prefix of the truth, every post it should hold down
//	          to its lowest entry
//	whole     it holds the whole history: a read that runs out of it need
//	          not ask PostgreSQL
//	token     a rebuild (the one holding that token) is filling it
//
// The lowest entry of a complete set is its bound: reads go on in
// PostgreSQL below it. Removing entries (deletes, unfollows, trims) only
// raises the bound, which keeps the set a prefix — until a set that is not
// whole loses its last post: a prefix of nothing knows no bound, so the
// scripts drop it and the next read rebuilds it.
//
// # Who the reader follows
//
// Beside each feed, a hash (follows:{id}) holds whom the reader follows
// now — a field per followee, whose value is the version of the reader's
// graph (from PostgreSQL) of the last follow state applied, plus one,
// negated once unfollowed, so that a state applied late cannot undo a
// newer one (see followField in lua/common.lua); "g",
// the graph version a rebuild wrote the hash at; and "v", a count that
// every change bumps and whose presence says the hash is complete. It is written by the rebuild from
// PostgreSQL, in the same script that completes the feed, and changed by the
// follow and unfollow scripts in the same call that changes the feed. The
// push script adds a post only to the feed of a reader who follows its
// author, so a fan-out that read its follower page before an unfollow
// writes nothing after it: the feed's header says as of which PostgreSQL
// write position its last rebuild or unfollow is visible, the fan-out reads
// the write position before its pages, and only a page read before the
// feed's position makes the script ask the hash. A feed whose hash is missing (it lives
// feed.active_days from its last rebuild, follow or unfollow, so an active
// reader's feed is rebuilt about that often) is dropped by the next follow
// or unfollow, and rebuilt by the next read when celebrities are pulled (the
// celebrities a reader follows are learned from the hash).
//
// Writers push only into feeds that exist, so a feed that Redis lost, or that
// was never read, costs nothing until its owner reads it and it is rebuilt.
// A rebuild first writes an empty set holding its token, so that pushes
// made while it reads PostgreSQL land in the feed too, and marks it complete
// at the end — only if its own token is still there: a follow or an
// unfollow while it read drops the set, a later rebuild replaces the token,
// and the rebuild gives up.
//
// # Readers who follow many
//
// A reader who follows more accounts than fanout.following_threshold keeps
// no feed at all: their rebuild counts whom they follow, and instead of a
// set it leaves a mark (followsmany:{id}, for a minute) that sends their
// reads to PostgreSQL. Pushes skip them as they skip any missing feed.
package feed

import "strconv"

const (
	// completeMarker is the member that marks the set of pulled authors
	// complete.
	completeMarker = "0"
	// versionField of the following hash counts its changes; the hash is
	// complete when it is there.
	versionField = "v"
	// mergesField of the following hash counts the merges of follows
	// pending (see markMerge in lua/common.lua).
	mergesField = "mg"
	// hidesField of the following hash lists the users whose entries the
	// reader's feed hides (see lua/hide.lua); a hash without it is from an
	// older version, and not complete.
	hidesField = "x"
)

// keys names every Redis key this package uses. Keys of one user share the
// hash tag {id}, so they live on one Redis Cluster slot and one script can
// change them together.
type keys struct{ prefix string }

// Key is the Redis key of userID's home feed under prefix, as this package
// names it: prefix + "feed:{id}". Code outside the package that looks at a
// feed in Redis (tests, the bench) names it with Key.
func Key(prefix string, userID int64) string {
	return KeyPrefix(prefix) + "{" + strconv.FormatInt(userID, 10) + "}"
}

// tagged is the key name of id, tagged with it: prefix + name + ":{id}".
func (k keys) tagged(name string, id int64) string {
	return k.prefix + name + ":{" + strconv.FormatInt(id, 10) + "}"
}

// StorageKeys are every Redis key that holds userID's home feed under
// prefix (not the reader's following hash), in the order of encoding.go —
// meta, head, tail: what MEMORY USAGE must sum to tell what a feed costs.
func StorageKeys(prefix string, userID int64) []string {
	return keys{prefix}.feedSet(userID).list()
}

// KeyPrefix is how every home feed key under prefix begins.
func KeyPrefix(prefix string) string { return prefix + "feed:" }

// feed is the meta key of userID's feed: whether and how it is there.
func (k keys) feed(userID int64) string { return Key(k.prefix, userID) }

// feedHead holds the newest entries of userID's feed (see encoding.go).
func (k keys) feedHead(userID int64) string { return k.tagged("feedhead", userID) }

// feedTail holds the older entries of userID's feed (see encoding.go).
func (k keys) feedTail(userID int64) string { return k.tagged("feedtail", userID) }

// setKeys are the three keys of a set (see encoding.go).
type setKeys struct{ meta, head, tail string }

// list is the keys in the order the scripts take them.
func (s setKeys) list() []string { return []string{s.meta, s.head, s.tail} }

func (k keys) feedSet(userID int64) setKeys {
	return setKeys{k.feed(userID), k.feedHead(userID), k.feedTail(userID)}
}

func (k keys) timelineSet(authorID int64) setKeys {
	return setKeys{k.timeline(authorID), k.timelineHead(authorID), k.timelineTail(authorID)}
}

// following names the reader's following hash. (Its name changed with its
// values, from 1 to signed versions: a process of the version before,
// during a rolling upgrade, would read a "no longer followed" field as
// followed. Each version finds the other's hashes missing, and rebuilds.)
func (k keys) following(userID int64) string { return k.tagged("follows", userID) }

// followed tells whether field and value of a following hash say that the
// reader follows that user: the field is a user id, the value positive
// (the version of the follow plus one; an unfollow leaves it negative).
func followed(field string, value any) bool {
	if _, err := strconv.ParseInt(field, 10, 64); err != nil {
		return false // "v", "g", or a post recorded while the hash was rebuilt
	}
	s, ok := value.(string)
	if !ok {
		return false
	}
	n, err := strconv.ParseInt(s, 10, 64)
	return err == nil && n > 0
}

// graphMarks holds the reader's changes in flight, each with when its mark
// expires (see Feeds.MarkGraphChange).
func (k keys) graphMarks(userID int64) string { return k.tagged("changes", userID) }

func (k keys) rebuildLock(userID int64) string { return k.tagged("feedlock", userID) }

// followsMany marks, for a while (followsManyTTL), that userID's feed is
// read from PostgreSQL: they follow more accounts than FollowingThreshold,
// and a rebuild found so (see Feeds.markFollowsMany).
func (k keys) followsMany(userID int64) string { return k.tagged("followsmany", userID) }

func (k keys) timeline(authorID int64) string { return k.tagged("timeline", authorID) }

func (k keys) timelineHead(authorID int64) string { return k.tagged("timelinehead", authorID) }

func (k keys) timelineTail(authorID int64) string { return k.tagged("timelinetail", authorID) }

func (k keys) timelineLock(authorID int64) string { return k.tagged("timelinelock", authorID) }

func (k keys) celebrities(userID int64) string { return k.tagged("celebs", userID) }

// pulled is the set of authors whose posts were ever pulled at read time
// instead of pushed (celebrities, now or before), with the member "0" when
// it is complete.
func (k keys) pulled() string { return k.prefix + "pulled" }

func (k keys) post(postID int64) string {
	return k.prefix + "post:" + strconv.FormatInt(postID, 10)
}
