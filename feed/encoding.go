package feed

import (
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"slices"

	"github.com/redis/go-redis/v9"
)

// How a set — a home feed or a celebrity's timeline — is laid out in Redis:
// a string and a list, so that a full feed of 800 entries costs under 10
// bytes an entry instead of the ~100 of a sorted set too big for a
// listpack, and a push is one APPEND.
//
//	head  <prefix>feed:{id}      a string: the header, then the newest
//	                             entries, 8 bytes big-endian each
//	tail  <prefix>feedtail:{id}  a list of chunks of the older entries,
//	                             each chunk a string of them, 8 bytes
//	                             big-endian each (a list grows and shrinks
//	                             at both ends without copying the rest)
//
// Entries are post ids, ascending in each of the two, and never in both;
// every head entry is newer than every tail entry. The header is 30 bytes:
//
//	byte  1      0xF1, this layout
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
//	             whether the tail could hold its post
//
// A push of the newest post appends to the head; once the head holds
// spillAt entries, the older half moves to the tail as one chunk, and a
// complete set is trimmed to max_len then: an RPUSH of the chunk, an LPOP
// or LSET of the oldest. The newest
// entries stay in the head (at least one while the set holds any), so that
// a push compares with them without reading the tail. The tail lives as
// long as the head (every write gives it the head's time to live); a head
// whose tail is not there, or not as long as the header says, is treated as
// missing and rebuilt.
const (
	headMagic    = 0xF1
	headerLen    = 30
	flagComplete = 1
	flagWhole    = 2
	flagBuilding = 4
	entryLen     = 8
)

// spillAt is how many entries the head gathers before the older half of
// them moves to the tail: an eighth of max_len (at most 64), so the tail is
// rewritten (and a full feed trimmed) once per spillAt/2 pushes, and a post
// pushed up to spillAt/2 places out of order changes the head alone.
func spillAt(maxLen int) int { return min(max(maxLen/8, 1), 64) }

// head is a set's head, parsed.
type head struct {
	flags   byte
	token   [8]byte
	asOf    int64
	tailN   int
	tailMax int64
	recent  []byte
}

func parseHead(v []byte) (head, bool) {
	if len(v) < headerLen || v[0] != headMagic || (len(v)-headerLen)%entryLen != 0 {
		return head{}, false
	}
	h := head{flags: v[1], asOf: getInt(v[10:18]),
		tailN: int(binary.BigEndian.Uint32(v[18:22])), tailMax: getInt(v[22:30]),
		recent: v[headerLen:]}
	copy(h.token[:], v[2:10])
	return h, true
}

func (h head) value() []byte {
	v := make([]byte, headerLen, headerLen+len(h.recent))
	v[0], v[1] = headMagic, h.flags
	copy(v[2:10], h.token[:])
	putInt(v[10:18], h.asOf)
	binary.BigEndian.PutUint32(v[18:22], uint32(min(max(h.tailN, 0), math.MaxUint32))) // ≤ max_len
	putInt(v[22:30], h.tailMax)
	return append(v, h.recent...)
}

// getInt and putInt read and write the header's and the entries' numbers:
// post ids and write positions, never negative, 8 bytes big-endian (which
// sort as the numbers do).
func getInt(b []byte) int64 {
	return int64(binary.BigEndian.Uint64(b) & math.MaxInt64)
}

func putInt(b []byte, n int64) { binary.BigEndian.PutUint64(b, uint64(max(n, 0))) }

func (h head) building() bool { return h.token != [8]byte{} }

func (h head) complete() bool { return !h.building() && h.flags&flagComplete != 0 }

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
func setValues(ids []int64, maxLen int, whole bool) (headV []byte, tail []any) {
	sorted := unpackIDs(packIDs(ids))
	if len(sorted) > maxLen {
		sorted, whole = sorted[len(sorted)-maxLen:], false
	}
	split := max(len(sorted)-1, 0)
	h := head{flags: flagComplete, tailN: split, recent: packIDs(sorted[split:])}
	if split > 0 {
		h.tailMax = sorted[split-1]
	}
	if whole {
		h.flags |= flagWhole
	}
	for i := 0; i < split; i += tailChunk {
		tail = append(tail, packIDs(sorted[i:min(i+tailChunk, split)]))
	}
	return h.value(), tail
}

// tailChunk is how many entries the chunks of a tail laid out at once hold
// (CHUNK in the scripts).
const tailChunk = 64

// storedSet is a set as one read found it.
type storedSet struct {
	exists, complete, whole, building bool
	ids                               []int64 // ascending
}

// decodeSet makes sense of a set's head as GET returned it (redis.Nil for a
// missing key) and of its tail's chunks as LRANGE did. A head of another
// layout (a sorted set of an older version answers WRONGTYPE), or a tail
// that does not match it, reads as a missing set, which the next read
// rebuilds.
func decodeSet(headV []byte, headErr error, chunks []string, tailErr error) (storedSet, error) {
	if err := cmp.Or(failure(headErr), failure(tailErr)); err != nil {
		return storedSet{}, err
	}
	h, ok := parseHead(headV)
	if headErr != nil || !ok {
		return storedSet{}, nil
	}
	var tail []byte
	for _, c := range chunks {
		tail = append(tail, c...)
	}
	if len(tail) != entryLen*h.tailN {
		return storedSet{}, nil
	}
	// The tail's entries, then the head's, ascending without repeats as the
	// scripts keep them; a set that is not reads as missing and is rebuilt.
	ids := unpackIDs(append(tail, h.recent...))
	for i := 1; i < len(ids); i++ {
		if ids[i] <= ids[i-1] {
			return storedSet{}, nil
		}
	}
	return storedSet{exists: true, complete: h.complete(), whole: h.flags&flagWhole != 0, building: h.building(),
		ids: ids}, nil
}

// setCmds read one set in a pipeline: its head and its tail's chunks.
type setCmds struct {
	head *redis.StringCmd
	tail *redis.StringSliceCmd
}

func getSet(ctx context.Context, p redis.Pipeliner, set setKeys) setCmds {
	return setCmds{head: p.Get(ctx, set.head), tail: p.LRange(ctx, set.tail, 0, -1)}
}

// decode is decodeSet of what the commands read.
func (c setCmds) decode() (storedSet, error) {
	headV, headErr := c.head.Bytes()
	chunks, tailErr := c.tail.Result()
	return decodeSet(headV, headErr, chunks, tailErr)
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
	cmds := make([]setCmds, len(sets))
	// Each command's error is its own (decodeSet tells a missing key or a
	// foreign type from a failure).
	_, _ = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, set := range sets {
			cmds[i] = getSet(ctx, p, set)
		}
		return nil
	})
	out := make([]Stored, len(sets))
	for i := range sets {
		set, err := cmds[i].decode()
		if err != nil {
			return nil, fmt.Errorf("inspect %s: %w", sets[i].head, err)
		}
		out[i] = Stored{Exists: set.exists, Complete: set.complete, Whole: set.whole, Building: set.building, IDs: set.ids}
	}
	return out, nil
}
