package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseMemInfo(t *testing.T) {
	info := "# Memory\r\nused_memory:1048576\r\nused_memory_human:1.00M\r\nused_memory_rss:4000000\r\n" +
		"mem_clients_normal:20496\r\nmem_clients_slaves:0\r\nlazyfree_pending_objects:3\r\n"
	m, err := parseMemInfo(info)
	require.NoError(t, err)
	require.Equal(t, memInfo{used: 1048576, clients: 20496, lazyfree: 3}, m)

	_, err = parseMemInfo("# Memory\r\nused_memory_rss:4000000\r\n")
	require.Error(t, err, "no used_memory")
	_, err = parseMemInfo("used_memory:lots\r\n")
	require.Error(t, err)
}

// TestMemoryArithmetic: used_memory's growth less the clients' buffers,
// per kept entry, and what a million full feeds make of it.
func TestMemoryArithmetic(t *testing.T) {
	before := memInfo{used: 10_000_000, clients: 100_000}
	after := memInfo{used: 18_600_000, clients: 700_000} // a query buffer kept 600 kB
	require.Equal(t, int64(8_000_000), after.grown(before))
	perKept := perEntry(after.grown(before), 500*800)
	require.InDelta(t, 20.0, perKept, 1e-9)
	require.InDelta(t, 16.0, gbPerMillion(perKept, 800), 1e-9, "20 B × 800 entries × 10⁶ readers = 16 GB")
	require.InDelta(t, 0.0, perEntry(100, 0), 0, "no entries")
	require.InDelta(t, 0.5, ratio(1, 2), 1e-12)
	require.InDelta(t, 0.0, ratio(1, 0), 0)
	require.Equal(t, int64(6), sum([]int64{1, 2, 3}))
}
