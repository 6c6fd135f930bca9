package domain

// QueuePartition is one partition of the ticket queue as an operator
// inspects it: its stream and its consumer group's pending list, as
// XPENDING's summary gives it.
type QueuePartition struct {
	// Partition is the partition's number; 0 is the queue's first stream.
	Partition int
	// Stream is the partition's stream key (the prefix included).
	Stream string
	// Length counts the stream's entries: tickets waiting for a worker and
	// tickets delivered and not acknowledged (acknowledged ones are deleted).
	Length int64
	// Pending counts the tickets delivered to a consumer of the group and not
	// acknowledged yet.
	Pending int64
	// OldestPendingID is the stream entry id of the oldest of them (its
	// milliseconds are when it was published), empty when none is pending.
	OldestPendingID string
	// Consumers are the consumers holding pending tickets, by name.
	Consumers []ConsumerPending
	// DeadLetters counts the tickets dead-lettered from this partition (its
	// dead-letter stream, capped; the outbox row is the record).
	DeadLetters int64
	// NoGroup: the consumer group does not exist on this stream (no worker
	// created it yet, or Redis lost it); no ticket is pending then.
	NoGroup bool
}

// ConsumerPending is one consumer's share of a partition's pending list.
type ConsumerPending struct {
	// Name is the consumer's name, as the worker process chose it.
	Name string
	// Pending counts the tickets it holds and has not acknowledged.
	Pending int64
}
