package main

import (
	_ "embed"
	"fmt"
	"os"
	"strings"

	"github.com/newsfeed/newsfeed/app"
)

//go:embed schema.sql
var schema string

func main() {
	if err := app.Execute(app.Assets{Schema: schema}, os.Args[1:]); err != nil {
		// One line on stderr, whatever the error's own line breaks.
		fmt.Fprintln(os.Stderr, "newsfeed: "+strings.Join(strings.Fields(err.Error()), " "))
		os.Exit(1)
	}
}
