// Command newsfeed-bench measures every stage of newsfeed's pipeline next to
// its physical limit (the stages are package bench). It is a command of its
// own so that the service binary links none of what only the bench needs
// (plots, their fonts and PDF and LaTeX backends).
//
// It runs the API, the dispatcher and the workers in this process, through
// app's exported API (one app.System for the API and the dispatcher, one for
// each start of the workers, as separate processes would), and starts the
// newsfeed binary as child processes for the schema (`newsfeed migrate`) and
// for the worker processes of the big and chunked fan-outs (`newsfeed work`).
// `make bench` builds both binaries into bin/.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	root := newCommand()
	root.SetArgs(os.Args[1:])
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		// One line on stderr, whatever the error's own line breaks.
		fmt.Fprintln(os.Stderr, "newsfeed-bench: "+strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(1)
	}
}
