package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/newsfeed/newsfeed/app"
)

func main() {
	if err := app.Execute(os.Args[1:]); err != nil {
		// One line on stderr, whatever the error's own line breaks.
		fmt.Fprintln(os.Stderr, "newsfeed: "+strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(1)
	}
}
