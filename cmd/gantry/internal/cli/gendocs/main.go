// Command gendocs writes the reference of every gantry command (Markdown
// and man pages) into the directory it is given: make docs runs it on
// docs/cli.
package main

import (
	"fmt"
	"os"
	"strings"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/cli"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: gendocs DIR")
		os.Exit(2)
	}
	for _, kv := range os.Environ() {
		for _, p := range cli.DocsEnvPrefixes {
			if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, p) {
				os.Unsetenv(k)
			}
		}
	}
	if err := cli.WriteDocs(os.Args[1]); err != nil {
		fmt.Fprintln(os.Stderr, "gendocs:", err)
		os.Exit(1)
	}
}
