package domain

import "errors"

// LiveKind says what a LiveEvent tells a connected reader.
type LiveKind int

const (
	// LivePost says Post landed in the reader's feed.
	LivePost LiveKind = iota + 1
	// LiveRemove says the post PostID left the reader's feed (deleted).
	LiveRemove
	// LiveUnfollowed says the reader no longer follows AuthorID, whose posts
	// left the feed.
	LiveUnfollowed
	// LiveFollowed says the reader follows AuthorID (again): their posts
	// may come.
	LiveFollowed
	// LiveCatchUp says events may have been missed (the live channel was
	// interrupted, or the reader's follows are not known here): read the
	// top of the feed again for what was not sent.
	LiveCatchUp
	// LiveResync says entries of the reader's feed may have left it or come
	// into it (a mute, a block, or their undoing; a post gone whose
	// repost shows now): read the top of the feed again, send a remove for
	// what was sent and left, and what shows and was not sent.
	LiveResync
)

// LiveEvent is one change of a connected reader's home feed, as the live
// channel brings it to the process that holds the reader's stream.
type LiveEvent struct {
	Kind LiveKind
	// Post is set for LivePost.
	Post Post
	// HidesChecked (LivePost): the hub found that the reader's feed does
	// not hide the post's author, as of the post's announcement.
	HidesChecked bool
	// PostID is set for LiveRemove.
	PostID int64
	// AuthorID is set for LiveUnfollowed and LiveFollowed.
	AuthorID int64
}

// LiveSubscription is one reader's open stream: the events meant for them
// until Close.
type LiveSubscription interface {
	// Events brings the reader's events in the order they arrived.
	Events() <-chan LiveEvent
	// Gone is closed when the subscription was dropped: its reader fell
	// too far behind, or the process is stopping.
	Gone() <-chan struct{}
	// Close ends the subscription and frees its place.
	Close()
}

var (
	// ErrTooManyStreams says the user has as many streams open as they may
	// (stream.max_per_user).
	ErrTooManyStreams = errors.New("too many streams for this user")
	// ErrStreamsFull says this process holds as many streams as it may
	// (stream.max_connections).
	ErrStreamsFull = errors.New("too many streams on this server")
)
