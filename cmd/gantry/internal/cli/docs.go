package cli

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/cobra/doc"
)

// The reference of every command, generated from the commands themselves
// (make docs): docs/cli/*.md, what gantry help prints, and docs/cli/man/
// the man pages. The generated files are committed; a test says when they
// are out of date.

// DocsEnvPrefixes are the environment variables some flags take their
// defaults from: the reference is generated without them, so it does not
// show the generating machine's settings.
var DocsEnvPrefixes = []string{"GANTRY_", "NATS_", "OTEL_"}

// manDate is the date the man pages carry: they change with the
// commands, not with the day they are generated, so it is fixed here.
var manDate = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// WriteDocs writes the Markdown reference of every command and help
// topic into dir, and their man pages into dir/man.
func WriteDocs(dir string) error {
	root := newRoot()
	root.DisableAutoGenTag = true
	if err := os.MkdirAll(filepath.Join(dir, "man"), 0o755); err != nil {
		return err
	}
	if err := doc.GenMarkdownTree(root, dir); err != nil {
		return fmt.Errorf("markdown: %w", err)
	}
	if err := writeHelpTopics(root, dir); err != nil {
		return err
	}
	header := &doc.GenManHeader{Title: "GANTRY", Section: "1", Source: "gantry", Manual: "gantry manual", Date: &manDate}
	if err := doc.GenManTree(root, header, filepath.Join(dir, "man")); err != nil {
		return fmt.Errorf("man pages: %w", err)
	}
	return nil
}

// writeHelpTopics writes a page per help topic (gantry help exit-codes),
// which cobra's generator leaves out.
func writeHelpTopics(root *cobra.Command, dir string) error {
	for _, c := range root.Commands() {
		if !c.IsAdditionalHelpTopicCommand() {
			continue
		}
		var b strings.Builder
		fmt.Fprintf(&b, "## gantry help %s\n\n%s\n\n```\n%s\n```\n\n### SEE ALSO\n\n* [gantry](gantry.md)\t - %s\n", c.Name(), c.Short, c.Long, root.Short)
		if err := os.WriteFile(filepath.Join(dir, "gantry_help_"+c.Name()+".md"), []byte(b.String()), 0o644); err != nil {
			return err
		}
	}
	return nil
}
