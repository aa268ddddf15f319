// Printing shared by the commands: JSON, lines and table rows safe on a
// terminal, durations.

package cli

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
)

// mustJSON is v as JSON (v is one of the bus types, which always encode).
func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// printJSON prints v as indented JSON, safe on a terminal (see
// termsafe.JSON).
func printJSON(w io.Writer, v any) error {
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false) // a command's &&, < and > as they are
	enc.SetIndent("", "  ")
	if err := enc.Encode(v); err != nil {
		return err
	}
	_, err := fmt.Fprintf(w, "%s\n", termsafe.JSON(bytes.TrimRight(b.Bytes(), "\n")))
	return err
}

// linef writes a line formatted as fmt.Sprintf does, with control
// characters shown escaped (newlines too): a line that quotes what a host,
// a service or a composition said cannot drive the terminal, nor pass for
// more lines than one.
func linef(w io.Writer, format string, args ...any) {
	fmt.Fprintln(w, termsafe.Line(fmt.Sprintf(format, args...)))
}

// row writes a row of a table (a text/tabwriter): its cells between tabs,
// each with control characters, tabs too, shown escaped: a host's name or
// error can neither drive the terminal nor move the columns.
func row(w io.Writer, cells ...string) {
	for i, c := range cells {
		if i > 0 {
			io.WriteString(w, "\t")
		}
		io.WriteString(w, termsafe.Cell(c))
	}
	io.WriteString(w, "\n")
}

// durationText is d rounded for reading: 0.4s, 12s, 3m05s, 1h02m.
func durationText(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < 10*time.Second:
		return fmt.Sprintf("%.1fs", d.Seconds())
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Round(time.Second).Seconds()))
	case d < time.Hour:
		d = d.Round(time.Second)
		return fmt.Sprintf("%dm%02ds", int(d/time.Minute), int(d%time.Minute/time.Second))
	}
	d = d.Round(time.Minute)
	return fmt.Sprintf("%dh%02dm", int(d/time.Hour), int(d%time.Hour/time.Minute))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
