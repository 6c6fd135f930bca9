package store

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestDesignShowsTheClaimQuery: docs/DESIGN.md shows the claim query that
// Claim runs, not an older one.
func TestDesignShowsTheClaimQuery(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile(filepath.Join("..", "docs", "DESIGN.md"))
	if err != nil {
		t.Fatal(err)
	}
	block := "```sql\n" + strings.TrimPrefix(claimSQL, "\n") + "\n```"
	if !strings.Contains(string(raw), block) {
		t.Errorf("docs/DESIGN.md does not show claimSQL of store/outbox.go; copy it into a sql block:\n%s", block)
	}
}
