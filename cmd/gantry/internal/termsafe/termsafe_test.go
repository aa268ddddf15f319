package termsafe

import (
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

// attack is what a host's error or output tail may hold: erase the line,
// move the cursor up, set the window title (an OSC ended by BEL).
const attack = "\x1b[2K\x1b[1A\x1b]0;pwned\x07"

func TestEscape(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, in          string
		line, cell, lines string // Lines with indent "> "
	}{
		{"plain", "hello world", "hello world", "hello world", "hello world"},
		{"empty", "", "", "", ""},
		{"UTF-8 kept", "café ✓ \ufffd 日本", "café ✓ \ufffd 日本", "café ✓ \ufffd 日本", "café ✓ \ufffd 日本"},
		{"backslash kept", `C:\x1b`, `C:\x1b`, `C:\x1b`, `C:\x1b`},
		{"attack", attack, `\x1b[2K\x1b[1A\x1b]0;pwned\x07`, `\x1b[2K\x1b[1A\x1b]0;pwned\x07`, `\x1b[2K\x1b[1A\x1b]0;pwned\x07`},
		{"tab", "a\tb", "a\tb", `a\x09b`, "a\tb"},
		{"newline", "a\nb", `a\x0ab`, `a\x0ab`, "a\n> b"},
		{"CR LF", "a\r\nb\r\n", `a\x0d\x0ab\x0d\x0a`, `a\x0d\x0ab\x0d\x0a`, "a\n> b"},
		{"lone CR", "100%\rdone", `100%\x0ddone`, `100%\x0ddone`, `100%\x0ddone`},
		{"final newlines dropped by Lines", "a\n\n", `a\x0a\x0a`, `a\x0a\x0a`, "a"},
		{"NUL, BS, DEL", "a\x00b\x08c\x7f", `a\x00b\x08c\x7f`, `a\x00b\x08c\x7f`, `a\x00b\x08c\x7f`},
		{"C1 CSI", "a\u009b2Jb", `a\u009b2Jb`, `a\u009b2Jb`, `a\u009b2Jb`},
		{"C1 bounds", "\u0080\u009f\u00a0", `\u0080\u009f` + "\u00a0", `\u0080\u009f` + "\u00a0", `\u0080\u009f` + "\u00a0"},
		{"8-bit CSI byte", "a\x9b2Jb", `a\x9b2Jb`, `a\x9b2Jb`, `a\x9b2Jb`},
		{"not UTF-8", "caf\xe9 \xff\xfe", `caf\xe9 \xff\xfe`, `caf\xe9 \xff\xfe`, `caf\xe9 \xff\xfe`},
		{"cut rune", "\xe2\x9c", `\xe2\x9c`, `\xe2\x9c`, `\xe2\x9c`},
		{"escape in a multi-line tail", "ok\n" + attack + "\nend", `ok\x0a\x1b[2K\x1b[1A\x1b]0;pwned\x07\x0aend`, `ok\x0a\x1b[2K\x1b[1A\x1b]0;pwned\x07\x0aend`, "ok\n> " + `\x1b[2K\x1b[1A\x1b]0;pwned\x07` + "\n> end"},
	} {
		if got := Line(c.in); got != c.line {
			t.Errorf("%s: Line(%q) = %q, want %q", c.name, c.in, got, c.line)
		}
		if got := Cell(c.in); got != c.cell {
			t.Errorf("%s: Cell(%q) = %q, want %q", c.name, c.in, got, c.cell)
		}
		if got := Lines(c.in, "> "); got != c.lines {
			t.Errorf("%s: Lines(%q) = %q, want %q", c.name, c.in, got, c.lines)
		}
		for _, out := range []string{Line(c.in), Cell(c.in)} {
			if !printable(out, "\t") {
				t.Errorf("%s: %q still drives a terminal", c.name, out)
			}
		}
		if out := Lines(c.in, "> "); !printable(out, "\t\n") {
			t.Errorf("%s: Lines: %q still drives a terminal", c.name, out)
		}
	}
}

// Every byte value, alone and after a valid rune, comes out safe.
func TestEscapeEveryByte(t *testing.T) {
	t.Parallel()
	for c := 0; c < 256; c++ {
		for _, in := range []string{string([]byte{byte(c)}), "é" + string([]byte{byte(c)}) + "x"} {
			if out := Line(in); !printable(out, "\t") {
				t.Errorf("Line(%q) = %q", in, out)
			}
			if out := Cell(in); !printable(out, "") {
				t.Errorf("Cell(%q) = %q", in, out)
			}
		}
	}
}

// JSON keeps what a JSON text says and makes it printable: DEL, C1
// controls and bytes that are not UTF-8 (which encoding/json leaves, or a
// message from the bus may hold) become JSON escapes.
func TestJSON(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, in, want string }{
		{"plain", `{"a":"b","n":1}`, `{"a":"b","n":1}`},
		{"UTF-8 kept", `{"a":"café ✓ \u001b"}`, `{"a":"café ✓ \u001b"}`},
		{"C1", "{\"a\":\"x\u009b2J\u0080\"}", `{"a":"x\u009b2J\u0080"}`},
		{"DEL", "[\"a\x7f\"]", `["a\u007f"]`},
		{"not UTF-8", "[\"caf\xe9 \x9b2J\"]", `["caf\ufffd \ufffd2J"]`},
		{"whitespace kept", "{\n\t\"a\": 1\r\n}", "{\n\t\"a\": 1\r\n}"},
	} {
		got := string(JSON([]byte(c.in)))
		if got != c.want {
			t.Errorf("%s: JSON(%q) = %q, want %q", c.name, c.in, got, c.want)
		}
		if !printable(got, "\t\n\r") {
			t.Errorf("%s: %q still drives a terminal", c.name, got)
		}
		var before, after any
		if err := json.Unmarshal([]byte(c.in), &before); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if err := json.Unmarshal([]byte(got), &after); err != nil {
			t.Fatalf("%s: %q is not JSON: %v", c.name, got, err)
		}
		if b, a := mustMarshal(t, before), mustMarshal(t, after); b != a {
			t.Errorf("%s: the value changed: %s, then %s", c.name, b, a)
		}
	}
	// encoding/json's output, whatever the string
	for c := 0; c < 256; c++ {
		in := mustMarshal(t, map[string]string{"s": "é" + string([]byte{byte(c)}) + string(rune(c)) + "x"})
		if out := JSON([]byte(in)); !printable(string(out), "") {
			t.Errorf("JSON(%q) = %q", in, out)
		}
	}
}

func mustMarshal(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// printable says whether out is UTF-8 with no control character but those in
// allowed: what the tests of the commands check their output with.
func printable(out, allowed string) bool {
	if !utf8.ValidString(out) {
		return false
	}
	return !strings.ContainsFunc(out, func(r rune) bool { return IsControl(r) && !strings.ContainsRune(allowed, r) })
}
