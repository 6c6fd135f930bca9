//go:build race

package api_test

// raceDetector: the tests run with -race, about ten times slower; the
// model-based test takes fewer steps there (make test runs it in full
// without -race as well).
const raceDetector = true
