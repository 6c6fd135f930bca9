// Package failpoint lets tests stop the product at the points where
// concurrent work can overtake it: between a PostgreSQL commit and the Redis
// step that follows, between a fan-out's page of followers and its push,
// between a rebuild's load and its finish. The code names the point with
// Hit; a test that wants to stall there puts a Func in the context it hands
// the product (the request's, the worker's). Without one, Hit costs a
// context lookup and does nothing, so production carries the points as
// they are.
package failpoint

import "context"

// Point names a place where the product may be stalled.
type Point string

// The points the product declares.
const (
	// AfterCommit: an API request has committed its change in PostgreSQL
	// and not yet applied it to Redis.
	AfterCommit Point = "after-commit"
	// BeforePush: a fan-out has read a page of followers and not yet
	// pushed the post into their feeds.
	BeforePush Point = "before-push"
	// BeforeApply: an event handler has read the state PostgreSQL has
	// (whom a user follows) and not yet applied it to Redis.
	BeforeApply Point = "before-apply"
	// BeforeFinishRebuild: a rebuild has read PostgreSQL and not yet
	// completed the set in Redis.
	BeforeFinishRebuild Point = "before-finish-rebuild"
)

// Func is called at every point a context carrying it reaches; it may block
// (to stall the caller) and should return when ctx is done.
type Func func(ctx context.Context, p Point)

type key struct{}

// With returns ctx carrying fn, called at every point reached under it.
func With(ctx context.Context, fn Func) context.Context {
	return context.WithValue(ctx, key{}, fn)
}

// Hit calls the Func that ctx carries, if any, at point p.
func Hit(ctx context.Context, p Point) {
	if fn, ok := ctx.Value(key{}).(Func); ok {
		fn(ctx, p)
	}
}
