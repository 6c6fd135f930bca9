package logctx_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/zap"

	"github.com/newsfeed/newsfeed/internal/logctx"
)

func TestFrom(t *testing.T) {
	t.Parallel()
	fallback, request := zap.NewNop(), zap.NewExample()
	require.Same(t, fallback, logctx.From(context.Background(), fallback), "outside a request")
	require.Same(t, request, logctx.From(logctx.With(context.Background(), request), fallback))
}
