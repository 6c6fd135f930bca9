package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSpreadIDs(t *testing.T) {
	require.Equal(t, []int64{1000, 1005, 1010}, spreadIDs(1000, 5, 3))
	require.Empty(t, spreadIDs(1, 1, 0))
}
