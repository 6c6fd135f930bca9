package queue

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// The keys of a queue on stream "nf:tickets":
//
//	nf:tickets             partition 0: the one stream of a queue of one partition
//	nf:tickets:{p}         partition p > 0; the hash tag {p} puts each in a slot of its own
//	nf:tickets:dead        partition 0's dead letters
//	nf:tickets:dead:{p}    partition p's, in partition p's slot
//	nf:tickets:partitions  the registry: a set of the partitions > 0 that tickets were written to
//	nf:tickets:bell        a stream of one entry that publishers append to, to wake readers
//
// Partition 0 keeps the keys the queue always had, so that an install of one
// partition keeps its stream, its dead letters and its ticket ids (only the
// bell is new), and tickets written before partitions existed are partition 0's.

// Key returns the stream key of a partition.
func (q *Queue) Key(part int) string {
	if part == 0 {
		return q.stream
	}
	return q.stream + ":{" + strconv.Itoa(part) + "}"
}

// DeadKey returns the dead-letter stream key of a partition.
func (q *Queue) DeadKey(part int) string {
	if part == 0 {
		return q.stream + ":dead"
	}
	return q.stream + ":dead:{" + strconv.Itoa(part) + "}"
}

// RegistryKey returns the key of the set of partitions that tickets were
// written to (partition 0 is implicit: every queue reads it).
func (q *Queue) RegistryKey() string { return q.stream + ":partitions" }

// BellKey returns the key of the stream that wakes waiting readers.
func (q *Queue) BellKey() string { return q.stream + ":bell" }

// Partition returns the partition of an event's tickets: its id hashed, so
// that consecutive events spread evenly and an event published again (a
// redelivery) goes to the same partition for as long as the count stays.
// Nothing depends on it beyond that: a ticket's id names its partition.
func (q *Queue) Partition(eventID int64) int {
	if q.partitions == 1 {
		return 0
	}
	return int(mix(uint64(eventID)) % uint64(q.partitions)) //nolint:gosec // the id's bits hashed, whatever its sign; the result is below partitions
}

// mix is the finalizer of SplitMix64: every bit of x moves every bit of the
// result, so ids that differ in one bit land in unrelated partitions.
func mix(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}

// ticketID is the id of the ticket that is entry of partition part: the
// stream entry id itself in partition 0 ("1712345678901-0", as ever),
// prefixed with the partition and a slash in the others ("3/1712345678901-0").
func ticketID(part int, entry string) string {
	if part == 0 {
		return entry
	}
	return strconv.Itoa(part) + "/" + entry
}

// ParseTicket splits a ticket id into its partition and its stream entry id.
// An id without a partition (every id from before partitions) is partition 0's.
func ParseTicket(ticket string) (part int, entry string, err error) {
	entry = ticket
	if p, e, ok := strings.Cut(ticket, "/"); ok {
		n, perr := strconv.Atoi(p)
		if perr != nil || n < 1 || n >= MaxPartitions || strconv.Itoa(n) != p {
			return 0, "", fmt.Errorf("ticket id %q: bad partition", ticket)
		}
		part, entry = n, e
	}
	ms, seq, ok := strings.Cut(entry, "-")
	if !ok || !digits(ms) || !digits(seq) {
		return 0, "", fmt.Errorf("ticket id %q: not a stream entry id", ticket)
	}
	return part, entry, nil
}

func digits(s string) bool {
	if s == "" || len(s) > 20 {
		return false
	}
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// configured returns the partitions of this queue's own count.
func (q *Queue) configured() []int {
	parts := make([]int, q.partitions)
	for i := range parts {
		parts[i] = i
	}
	return parts
}

// knownPartitions returns the partitions to read: the configured ones and
// those in the registry, read again every Refresh. If the registry cannot be
// read, the last set stays, the error is returned once, and the registry is
// tried again after Refresh.
func (q *Queue) knownPartitions(ctx context.Context) ([]int, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if time.Since(q.knownAt) < q.refresh {
		return q.known, nil
	}
	q.knownAt = time.Now()
	members, err := q.rdb.SMembers(ctx, q.RegistryKey()).Result()
	if err != nil {
		return q.known, fmt.Errorf("read the partitions of %s: %w", q.stream, err)
	}
	parts := q.configured()
	for _, m := range members {
		p, err := strconv.Atoi(m)
		if err == nil && p >= q.partitions && p < MaxPartitions {
			parts = append(parts, p)
		}
	}
	slices.Sort(parts)
	q.known = slices.Compact(parts)
	return q.known, nil
}

// forget drops a partition from the known set until the registry is read again.
func (q *Queue) forget(part int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.known = slices.DeleteFunc(slices.Clone(q.known), func(p int) bool { return p == part })
}

// register queues, on p, the registration of the partitions > 0 of parts
// and a ring of the bell, and returns the registration's command (nil when
// there is none to make). Queue it only after the tickets it is about, on
// the same connection, or send it after they were accepted: retire relies
// on that order. A lost ring costs latency only: a waiting reader looks
// again when its wait ends.
func (q *Queue) register(ctx context.Context, p redis.Pipeliner, parts []int) *redis.IntCmd {
	var sadd *redis.IntCmd
	if members := registryMembers(parts); len(members) > 0 {
		sadd = p.SAdd(ctx, q.RegistryKey(), members...)
	}
	p.XAdd(ctx, &redis.XAddArgs{Stream: q.BellKey(), MaxLen: 1, Values: []any{"r", 1}})
	return sadd
}

// reregister adds the partitions > 0 of parts to the registry.
func (q *Queue) reregister(ctx context.Context, parts []int) error {
	members := registryMembers(parts)
	if len(members) == 0 {
		return nil
	}
	if err := q.rdb.SAdd(ctx, q.RegistryKey(), members...).Err(); err != nil {
		return fmt.Errorf("register the partitions of %s: %w", q.stream, err)
	}
	return nil
}

// registryMembers returns the partitions > 0 of parts, once each.
func registryMembers(parts []int) []any {
	var members []any
	seen := map[int]bool{}
	for _, p := range parts {
		if p > 0 && !seen[p] {
			seen[p] = true
			members = append(members, strconv.Itoa(p))
		}
	}
	return members
}

// deleteIfEmpty deletes a stream (and so its group) if it holds no entry,
// in one step, and returns its length.
var deleteIfEmpty = redis.NewScript(`
local n = redis.call('XLEN', KEYS[1])
if n == 0 then redis.call('DEL', KEYS[1]) end
return n`)

// retire takes out of the registry the partitions beyond this queue's count
// that are empty, and deletes their streams. It runs on readers, every
// Refresh. A writer registers a partition after writing to it; retire
// unregisters first and looks second, and registers again what it finds
// non-empty. So a ticket is never left in a partition that is not
// registered: either its registration comes after the SREM, or its write
// came before the look, which sees it.
func (q *Queue) retire(ctx context.Context) error {
	q.mu.Lock()
	due := time.Since(q.retiredAt) >= q.refresh
	if due {
		q.retiredAt = time.Now()
	}
	q.mu.Unlock()
	if !due {
		return nil
	}
	members, err := q.rdb.SMembers(ctx, q.RegistryKey()).Result()
	if err != nil {
		return fmt.Errorf("read the partitions of %s: %w", q.stream, err)
	}
	var extra []int
	for _, m := range members {
		if p, err := strconv.Atoi(m); err == nil && p >= q.partitions {
			extra = append(extra, p)
		}
	}
	if len(extra) == 0 {
		return nil
	}
	// A first look skips the partitions that are plainly in use.
	lens := make([]*redis.IntCmd, len(extra))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range extra {
			lens[i] = p.XLen(ctx, q.Key(part))
		}
		return nil
	})
	var empty []any
	var emptyParts []int
	for i, c := range lens {
		if c.Err() == nil && c.Val() == 0 {
			empty = append(empty, strconv.Itoa(extra[i]))
			emptyParts = append(emptyParts, extra[i])
		}
	}
	if len(empty) == 0 {
		return nil
	}
	if err := q.rdb.SRem(ctx, q.RegistryKey(), empty...).Err(); err != nil {
		return fmt.Errorf("retire partitions of %s: %w", q.stream, err)
	}
	checks := make([]*redis.Cmd, len(emptyParts))
	_, _ = q.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, part := range emptyParts {
			checks[i] = deleteIfEmpty.Eval(ctx, p, []string{q.Key(part)}) // EVAL: a pipeline cannot fall back from EVALSHA
		}
		return nil
	})
	var keep []int
	var errs []error
	for i, c := range checks {
		n, err := c.Int64()
		switch {
		case err != nil:
			keep = append(keep, emptyParts[i]) // not known to be empty: registered again
			errs = append(errs, fmt.Errorf("retire %s: %w", q.Key(emptyParts[i]), err))
		case n > 0:
			keep = append(keep, emptyParts[i]) // written to meanwhile
		default:
			q.forget(emptyParts[i])
		}
	}
	if err := q.reregister(ctx, keep); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
