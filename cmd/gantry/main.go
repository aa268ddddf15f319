// Command gantry is the command-line client of gantry: it validates and
// plans compositions, and (with the services) submits and watches runs.
package main

import (
	"os"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/cli"
)

func main() {
	os.Exit(cli.Execute(os.Args[1:], os.Stdout, os.Stderr))
}
