// Package defaults is what the components' configurations do alike: a zero
// field takes the default the component documents (a Default* constant), and
// a negative one is out of range, refused by the constructor with an error
// that names the field.
package defaults

import (
	"fmt"
	"strings"
)

// Number is the type of a field that has a default (time.Duration
// among them).
type Number interface {
	~int | ~int64
}

// NotNegative returns nil for v ≥ 0, and otherwise the error of the field
// of config, the configuration's type with its package ("feed.Config",
// "outbox.CleanerConfig"): zero says what 0 would have meant (The(default),
// or "none").
func NotNegative[T Number](config, field string, v T, zero string) error {
	if v >= 0 {
		return nil
	}
	pkg, typ, _ := strings.Cut(config, ".")
	return fmt.Errorf("%s: %s.%s is %v, out of range: it must be positive, or 0 for %s", pkg, typ, field, v, zero)
}

// The says what 0 means for a field that defaults to v.
func The(v any) string { return fmt.Sprint("the default ", v) }

// Fill sets *v to def when it is zero.
func Fill[T Number](v *T, def T) {
	if *v == 0 {
		*v = def
	}
}
