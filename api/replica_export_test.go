package api

import "time"

// SetCheckWait sets how long each look at a write position and at the
// replica's progress may take, in place of positionWait (250 ms): a test
// that counts which reason sent a listing to the primary gives the checks
// time enough that a busy machine does not turn "lagging" into "unchecked".
func SetCheckWait(rw *ReadYourWrites, wait time.Duration) {
	rw.checkWait = wait
}
