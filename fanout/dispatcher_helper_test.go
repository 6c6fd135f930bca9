package fanout_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/newsfeed/newsfeed/outbox"
)

// newDispatcher builds the dispatcher that publishes a test's outbox rows.
func newDispatcher(t *testing.T, st outbox.Store, pub outbox.Publisher, cfg outbox.Config) *outbox.Dispatcher {
	t.Helper()
	d, err := outbox.NewDispatcher(st, pub, cfg)
	require.NoError(t, err)
	return d
}
