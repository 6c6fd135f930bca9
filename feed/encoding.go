package feed

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// How a set — a home feed or a celebrity's timeline — is laid out in Redis:
// two strings and a list, so that a full feed of 800 entries costs under
// 10 bytes an entry instead of the ~100 of a sorted set too big for a
// listpack, and a push is an MGET of a few bytes and an APPEND.
//
//	meta  <prefix>feed:{id}      a string, the header (below): whether the
//	                             set is there, and what it is
//	head  <prefix>feedhead:{id}  a string: 0xF2, then the newest entries,
//	                             8 bytes big-endian each, in the order
//	                             pushes appended them
//	tail  <prefix>feedtail:{id}  a list of chunks of the older entries,
//	                             each chunk a string of them, 8 bytes
//	                             big-endian each (a list grows and shrinks
//	                             at both ends without copying the rest)
//
// Entries are post ids, never in both head and tail: the tail's ascending
// without repeats, the head's as they came — fan-outs side by side finish
// in any order, and a push that takes itself for a first one appends its
// post without looking (see pushScript), so a post may be there twice until
// the head is rewritten in order; every head entry is newer than every tail
// entry. The meta is kept apart from the entries because a push reads it
// for every follower of a page: in one MGET, a script reads a few bytes a
// follower instead of a head's hundreds (Redis turns what a script reads
// into Lua strings at about 1.5 ns a byte). The header is 30 bytes:
//
//	byte  1      0xF3, this layout (0xF1 began the head of the two-key
//	             layout before it: a version that reads one reads the other
//	             as missing, and rebuilds it)
//	byte  2      flags: 1 complete (a newest prefix of the truth, every post
//	             it should hold down to its lowest entry, which is its
//	             bound), 2 whole (it holds the whole history: a read that
//	             runs out of it need not ask PostgreSQL), 4 under rebuild
//	             (a token follows; the flag lets a push tell at a glance)
//	bytes 3–10   the token of the rebuild filling it; zeros: none
//	bytes 11–18  "as of": the PostgreSQL write position after which the
//	             reader's last rebuild or unfollow is visible to every read
//	             (see pushScript)
//	bytes 19–22  how many entries the tail holds
//	bytes 23–30  the tail's newest entry (0: none), which tells a push
//	             whether its post goes into the tail or the head
//
// A push of a post newer than the tail's newest appends to the head; once
// the head holds spillAt entries, they are put in order and all but the
// newest quarter move to the tail as one chunk, and a complete set is trimmed to max_len
// then: an RPUSH of the chunk, an LPOP or LSET of the oldest. The newest
// entries stay in the head (at least one while the set holds any). Head
// and tail live as long as the meta (every write that makes them gives
// them its time to live); a set whose head is missing (an APPEND to a lost
// head makes a string without the 0xF2), or whose tail is not as long as
// the header says, is treated as missing and rebuilt.
const (
	metaMagic    = 0xF3 // the meta's first byte
	entriesMagic = 0xF2 // the head's first byte
	headerLen    = 30
	flagComplete = 1
	flagWhole    = 2
	flagBuilding = 4
	entryLen     = 8
)

// spillAt is how many entries the head gathers before all but the newest
// quarter of them move to the tail: a sixth of max_len (at most 128), so
// the tail is rewritten (and a full feed trimmed) once per 3/4 spillAt
// pushes, and a post pushed up to spillAt/4 places out of order is appended
// to the head like any other. A spill costs little for each entry it moves
// (one struct call unpacks them all) and a fixed cost per spill, which a
// longer head spreads further: the head's length costs the push nothing,
// as it never reads it.
func spillAt(maxLen int) int { return min(max(maxLen/6, 1), 128) }

// header is a set's meta, parsed, with the head's entries (recent, as
// stored: in the order they came).
type header struct {
	flags   byte
	token   [8]byte
	asOf    int64
	tailN   int
	tailMax int64
	recent  []byte
}

// parseSet parses a set's meta and head values; false when either is not
// of this layout (a key missing, or left by an older version).
func parseSet(metaV, headV []byte) (header, bool) {
	if len(metaV) != headerLen || metaV[0] != metaMagic ||
		len(headV) < 1 || headV[0] != entriesMagic || (len(headV)-1)%entryLen != 0 {
		return header{}, false
	}
	h := header{flags: metaV[1], asOf: getInt(metaV[10:18]),
		tailN: int(binary.BigEndian.Uint32(metaV[18:22])), tailMax: getInt(metaV[22:30]),
		recent: headV[1:]}
	copy(h.token[:], metaV[2:10])
	return h, true
}

// meta is the meta key's value.
func (h header) meta() []byte {
	v := make([]byte, headerLen)
	v[0], v[1] = metaMagic, h.flags
	copy(v[2:10], h.token[:])
	putInt(v[10:18], h.asOf)
	binary.BigEndian.PutUint32(v[18:22], uint32(min(max(h.tailN, 0), math.MaxUint32))) // ≤ max_len
	putInt(v[22:30], h.tailMax)
	return v
}

// head is the head key's value.
func (h header) head() []byte { return append([]byte{entriesMagic}, h.recent...) }

// getInt and putInt read and write the header's and the entries' numbers:
// post ids and write positions, never negative, 8 bytes big-endian (which
// sort as the numbers do).
func getInt(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) & math.MaxInt64)
}

func putInt(b []byte, n int64) { binary.BigEndian.PutUint64(b, uint64(max(n, 0))) }

// entries are the head's entries ascending, without repeats: a push
// appends its post as it comes (see pushScript).
func (h header) entries() []int64 {
	ids := unpackIDs(h.recent)
	slices.Sort(ids)
	return slices.Compact(ids)
}

func (h header) building() bool { return h.token != [8]byte{} }

func (h header) complete() bool { return !h.building() && h.flags&flagComplete != 0 }

// packIDs lays ids out as entries: ascending, without repeats.
func packIDs(ids []int64) []byte {
	sorted := slices.Clone(ids)
	slices.Sort(sorted)
	sorted = slices.Compact(sorted)
	p := make([]byte, 0, entryLen*len(sorted))
	for _, id := range sorted {
		p = binary.BigEndian.AppendUint64(p, uint64(max(id, 0)))
	}
	return p
}

func unpackIDs(p []byte) []int64 {
	ids := make([]int64, len(p)/entryLen)
	for i := range ids {
		ids[i] = getInt(p[i*entryLen:])
	}
	return ids
}

// setValues lays out a complete set holding ids (the newest maxLen of
// them) as the scripts would leave it: the newest entry in the head, the
// rest in the tail.
func setValues(ids []int64, maxLen int, whole bool) (metaV, headV []byte, tail []any) {
	sorted := unpackIDs(packIDs(ids))
	if len(sorted) > maxLen {
		sorted, whole = sorted[len(sorted)-maxLen:], false
	}
	split := max(len(sorted)-1, 0)
	h := header{flags: flagComplete, tailN: split, recent: packIDs(sorted[split:])}
	if split > 0 {
		h.tailMax = sorted[split-1]
	}
	if whole {
		h.flags |= flagWhole
	}
	for i := 0; i < split; i += tailChunk {
		tail = append(tail, packIDs(sorted[i:min(i+tailChunk, split)]))
	}
	return h.meta(), h.head(), tail
}

// tailChunk is how many entries the chunks of a tail laid out at once hold
// (CHUNK in the scripts).
const tailChunk = 64

// storedSet is a set as one read found it.
type storedSet struct {
	exists, complete, whole, building bool
	ids                               []int64 // ascending
}

// decodeSet makes sense of a set's meta and head values ("" for a missing
// key, or one of another type) and of its tail's newest chunks, oldest
// first: all of them when wholeTail, else as many as the read needed
// (readScript). A set of another layout (a sorted set or a two-key feed of
// an older version), or a head or tail that does not match its meta, reads
// as a missing set, which the next read rebuilds.
func decodeSet(metaV, headV []byte, chunks []string, wholeTail bool) storedSet {
	h, ok := parseSet(metaV, headV)
	if !ok {
		return storedSet{}
	}
	var tail []byte
	for _, c := range chunks {
		tail = append(tail, c...)
	}
	if len(tail) > entryLen*h.tailN || wholeTail && len(tail) != entryLen*h.tailN {
		return storedSet{}
	}
	// The tail's entries, ascending without repeats as the scripts keep
	// them, then the head's, in order (pushes append them as they come);
	// every head entry is newer than the tail's. A set that is not so reads
	// as missing and is rebuilt.
	ids := unpackIDs(tail)
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return storedSet{}
		}
	}
	recent := h.entries()
	if len(ids) > 0 && len(recent) > 0 && recent[0] <= ids[len(ids)-1] {
		return storedSet{}
	}
	ids = append(ids, recent...)
	return storedSet{exists: true, complete: h.complete(), whole: h.flags&flagWhole != 0, building: h.building(),
		ids: ids}
}

// setRead reads one set in a pipeline, at one moment (readScript).
type setRead struct{ cmd *redis.Cmd }

// allEntries asks readSet for every entry of a set.
const allEntries = 0

// readSet reads set's meta, head and the chunks of its tail that hold its n
// newest entries below before (n allEntries: the whole tail), in one call
// of readScript: one moment, whatever changes the set around the read.
// keep (not 0) makes a complete set live that long from now (see
// readScript).
func readSet(ctx context.Context, p redis.Pipeliner, set setKeys, before int64, n int, keep time.Duration) setRead {
	return setRead{p.EvalSha(ctx, readScript.Hash(), set.list(), before, n, int64(keep/time.Second))}
}

// decode is decodeSet of what readScript answered; an error is the call's
// (a set missing, or of another layout, is a missing set, not an error).
func (r setRead) decode() (storedSet, error) {
	v, err := r.cmd.Result()
	if err != nil {
		return storedSet{}, err
	}
	parts, ok := v.([]any)
	if !ok || len(parts) < 3 {
		return storedSet{}, nil // the meta or the head is missing
	}
	str := func(x any) string { s, _ := x.(string); return s }
	chunks := make([]string, 0, len(parts)-3)
	for _, c := range parts[3:] {
		chunks = append(chunks, str(c))
	}
	whole, _ := parts[2].(int64)
	return decodeSet([]byte(str(parts[0])), []byte(str(parts[1])), chunks, whole == 1), nil
}

// pipelinedReads runs a pipeline that reads sets with readSet, loading
// readScript and running it again if a node did not know the script (it
// restarted, or is a replica a failover promoted).
func pipelinedReads(ctx context.Context, rdb redis.UniversalClient, fn func(redis.Pipeliner) error) ([]redis.Cmder, error) {
	cmds, err := rdb.Pipelined(ctx, fn)
	for _, c := range cmds {
		if isNoScript(c.Err()) {
			if lerr := readScript.Load(ctx, rdb).Err(); lerr != nil {
				return cmds, lerr
			}
			return rdb.Pipelined(ctx, fn)
		}
	}
	return cmds, err
}

// failure is err unless it only says that a key is not there or is not a
// string (WRONGTYPE: a sorted set an older version left), which reads as a
// missing set.
func failure(err error) error {
	if err == nil || isNil(err) || isWrongType(err) {
		return nil
	}
	return err
}

// Stored is a feed or a timeline as Redis holds it, for tests and tools
// that look under the hood.
type Stored struct {
	// Exists: Redis holds the set (complete or under rebuild).
	Exists bool
	// Complete: a newest prefix of the truth, every post down to its lowest.
	Complete bool
	// Whole: it holds the whole history.
	Whole bool
	// Building: a rebuild is filling it.
	Building bool
	// IDs are the post ids it holds, ascending.
	IDs []int64
	// FollowsMany (from Rebuild only): the reader follows more accounts
	// than fanout.following_threshold, so Redis keeps no feed for them and
	// their reads come from PostgreSQL.
	FollowsMany bool
}

// Has reports whether the set holds postID.
func (s Stored) Has(postID int64) bool {
	_, found := slices.BinarySearch(s.IDs, postID)
	return found
}

// Inspect reads userID's home feed under prefix as Redis holds it.
func Inspect(ctx context.Context, rdb redis.UniversalClient, prefix string, userID int64) (Stored, error) {
	sets, err := InspectMany(ctx, rdb, prefix, []int64{userID})
	if err != nil {
		return Stored{}, err
	}
	return sets[0], nil
}

// InspectMany reads the home feeds of users under prefix, in one pipeline.
func InspectMany(ctx context.Context, rdb redis.UniversalClient, prefix string, users []int64) ([]Stored, error) {
	k := keys{prefix}
	sets := make([]setKeys, len(users))
	for i, u := range users {
		sets[i] = k.feedSet(u)
	}
	return inspect(ctx, rdb, sets)
}

// InspectTimeline reads a celebrity's timeline under prefix as Redis holds it.
func InspectTimeline(ctx context.Context, rdb redis.UniversalClient, prefix string, authorID int64) (Stored, error) {
	sets, err := inspect(ctx, rdb, []setKeys{keys{prefix}.timelineSet(authorID)})
	if err != nil {
		return Stored{}, err
	}
	return sets[0], nil
}

func inspect(ctx context.Context, rdb redis.UniversalClient, sets []setKeys) ([]Stored, error) {
	cmds := make([]setRead, len(sets))
	// Each command's error is its own.
	_, _ = pipelinedReads(ctx, rdb, func(p redis.Pipeliner) error {
		for i, set := range sets {
			cmds[i] = readSet(ctx, p, set, math.MaxInt64, allEntries, 0)
		}
		return nil
	})
	out := make([]Stored, len(sets))
	for i := range sets {
		set, err := cmds[i].decode()
		if err != nil {
			return nil, fmt.Errorf("inspect %s: %w", sets[i].meta, err)
		}
		out[i] = Stored{Exists: set.exists, Complete: set.complete, Whole: set.whole, Building: set.building, IDs: set.ids}
	}
	return out, nil
}
