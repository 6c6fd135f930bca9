//go:build !race

package e2e

// raceDetector: the tests run with -race, and so does the binary they drive.
const raceDetector = false
