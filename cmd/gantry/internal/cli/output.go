package cli

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"
)

// Every command that prints takes -o: its text (or table) by default,
// json, or yaml. The JSON and the YAML carry the same fields, the JSON
// names; a command that streams (watch, logs -f) prints a JSON object per
// line, or a YAML document ("---") per record.

// Output formats of -o.
const (
	formatJSON = "json"
	formatYAML = "yaml"
)

// outputFlag registers -o with its formats (the first is the default);
// a command that prints JSON prints YAML too. Any other value is refused
// before the command does anything.
func outputFlag(cmd *cobra.Command, output *string, formats ...string) {
	if slices.Contains(formats, formatJSON) && !slices.Contains(formats, formatYAML) {
		formats = append(formats, formatYAML)
	}
	cmd.Flags().StringVarP(output, "output", "o", formats[0], strings.Join(formats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(formats, cobra.ShellCompDirectiveNoFileComp))
	cmd.PreRunE = func(*cobra.Command, []string) error {
		if !slices.Contains(formats, *output) {
			return &exitError{code: ExitUsage, err: fmt.Errorf("unknown -o %q: use %s", *output, strings.Join(formats, ", "))}
		}
		return nil
	}
}

// structured says whether -o asks for JSON or YAML.
func structured(format string) bool { return format == formatJSON || format == formatYAML }

// printAs prints v as indented JSON or as YAML (format), safe on a
// terminal: control characters are escaped in both.
func printAs(w io.Writer, format string, v any) error {
	if format != formatYAML {
		return printJSON(w, v)
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printYAML(w, b, false)
}

// printRecord prints one record of a stream, given as its JSON: a line of
// JSON, or a YAML document after "---".
func printRecord(w io.Writer, format string, js []byte) error {
	if format == formatYAML {
		return printYAML(w, js, true)
	}
	_, err := fmt.Fprintf(w, "%s\n", termsafe.JSON(bytes.TrimSpace(js)))
	return err
}

// printYAML prints a JSON document as YAML, keys in the JSON's order;
// doc starts it with "---". The YAML encoder writes control characters
// as escapes in a double-quoted string.
func printYAML(w io.Writer, js []byte, doc bool) error {
	var n yaml.Node
	if err := yaml.Unmarshal(js, &n); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	blockStyle(&n)
	var b bytes.Buffer
	if doc {
		b.WriteString("---\n")
	}
	enc := yaml.NewEncoder(&b)
	enc.SetIndent(2)
	if err := enc.Encode(&n); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	if err := enc.Close(); err != nil {
		return fmt.Errorf("yaml: %w", err)
	}
	_, err := w.Write(b.Bytes())
	return err
}

// blockStyle drops the flow style and quotes JSON has, so the encoder
// picks YAML's own (it still quotes a string that would read as another
// type).
func blockStyle(n *yaml.Node) {
	n.Style = 0
	for _, c := range n.Content {
		blockStyle(c)
	}
}

// classifyErrors gives every error a command can return its exit code
// (gantry help exit-codes): a bad flag or argument is a usage error; an
// error a command returns without one is exit 3 (it could not do its work:
// a file it could not read, a server it could not reach).
func classifyErrors(root *cobra.Command) {
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		return &exitError{code: ExitUsage, err: err}
	})
	var walk func(*cobra.Command)
	walk = func(c *cobra.Command) {
		if args := c.Args; args != nil {
			c.Args = func(cmd *cobra.Command, a []string) error {
				var own *exitError
				switch err := args(cmd, a); {
				case errors.As(err, &own):
					return err // a command's own check, worded by it
				case err != nil:
					return &exitError{code: ExitUsage, err: fmt.Errorf("%s: %w", cmd.CommandPath(), err)}
				}
				return nil
			}
		}
		if run := c.RunE; run != nil {
			c.RunE = func(cmd *cobra.Command, a []string) error { return withExitCode(run(cmd, a)) }
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
}

// withExitCode is err with its exit code: its own, else exit 3 (a
// file it could not read, a server or stream it could not reach, output
// it could not write).
func withExitCode(err error) error {
	var ee *exitError
	if err == nil || errors.As(err, &ee) {
		return err
	}
	return &exitError{code: ExitProblem, err: err}
}

// unreadable says whether err is an input that could not be read (a
// missing file, a directory, no permission): exit 3, not a problem of
// what it says.
func unreadable(err error) bool {
	var pe *fs.PathError
	return errors.As(err, &pe)
}
