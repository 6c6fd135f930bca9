// Package logctx carries a request's logger in its context, so that every
// line logged while serving the request — by the API or by the adapters it
// calls — has the request's id.
package logctx

import (
	"context"

	"go.uber.org/zap"
)

type key struct{}

// With returns ctx carrying log, the request's logger.
func With(ctx context.Context, log *zap.Logger) context.Context {
	return context.WithValue(ctx, key{}, log)
}

// From returns the logger With put in ctx, or fallback outside a request.
func From(ctx context.Context, fallback *zap.Logger) *zap.Logger {
	if log, ok := ctx.Value(key{}).(*zap.Logger); ok {
		return log
	}
	return fallback
}
