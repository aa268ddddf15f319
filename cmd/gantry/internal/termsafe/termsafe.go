// Package termsafe makes text that came from elsewhere (a host's output,
// errors and exit reasons, a composition or inventory, the bus) safe to
// print on a terminal: its control characters, which would drive the
// terminal (move the cursor, erase lines, set the window title or the
// clipboard), are shown escaped instead.
//
// Escaped are the C0 controls and DEL, shown as \x1b; the C1 controls
// (U+0080 to U+009F: U+009B is a CSI on many terminals), shown as
// \u009b; and each byte that is not UTF-8, shown as \xff (an 8-bit
// terminal would take 0x9b for a CSI too). A tab is kept, but in a
// table's cell; a newline is kept by Lines only. A backslash is not
// escaped: a host can print text that reads like an escape, but cannot
// drive the terminal.
package termsafe

import (
	"fmt"
	"strings"
	"unicode/utf8"
)

// Line is s made safe to print within one line: every control character
// but a tab, newlines and carriage returns too, is shown escaped.
func Line(s string) string { return escape(s, true, false, "") }

// Cell is s made safe to print as a cell of a table (text/tabwriter): as
// Line, and a tab is shown escaped too, so that s cannot add columns and
// pass a value of its own off as the next column's.
func Cell(s string) string { return escape(s, false, false, "") }

// Lines is s made safe to print as lines of their own: as Line, but each
// newline (or CR LF) is kept and followed by indent, so that a line of s
// cannot pass for a line gantry prints. Newlines at the end of s are
// dropped: the caller ends the text.
func Lines(s, indent string) string {
	s = strings.TrimRight(s, "\r\n")
	return escape(s, true, true, indent)
}

// IsControl says whether r is a control character: C0, DEL or C1.
func IsControl(r rune) bool {
	return r < 0x20 || r == 0x7f || r >= 0x80 && r < 0xa0
}

// escape is s with its control characters (but a tab with keepTab, and a
// newline with keepNewline, then followed by indent) and bytes that are
// not UTF-8 shown escaped.
func escape(s string, keepTab, keepNewline bool, indent string) string {
	if safe(s, keepTab) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s) + 16)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			hex(&b, `\x`, rune(s[i]), 2)
		case r == '\t' && keepTab:
			b.WriteByte('\t')
		case r == '\r' && keepNewline && strings.HasPrefix(s[i+1:], "\n"):
			// CR LF is a newline: the LF keeps it
		case r == '\n' && keepNewline:
			b.WriteByte('\n')
			b.WriteString(indent)
		case r < 0x80 && IsControl(r):
			hex(&b, `\x`, r, 2)
		case IsControl(r):
			hex(&b, `\u`, r, 4)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// safe says whether s is UTF-8 without control characters (but tabs with
// keepTab), to print as it is.
func safe(s string, keepTab bool) bool {
	for _, r := range s { // a byte that is not UTF-8 is a RuneError
		if r == utf8.RuneError || IsControl(r) && !(r == '\t' && keepTab) {
			return false
		}
	}
	return true
}

func hex(b *strings.Builder, prefix string, r rune, digits int) {
	const hexDigits = "0123456789abcdef"
	b.WriteString(prefix)
	for d := digits - 1; d >= 0; d-- {
		b.WriteByte(hexDigits[(r>>(4*d))&0xf])
	}
}

// JSON is a JSON text made safe to print on a terminal, the value it
// encodes unchanged. encoding/json escapes the C0 controls but leaves DEL
// and the C1 controls as they are, and a message from the bus may hold
// bytes that are not UTF-8 (a Go decoder reads each as U+FFFD): in a JSON
// text these are only ever inside strings, where JSON shows them as
// \u007f, \u009b and \ufffd. js must be JSON (as an encoder writes it, or
// as a decoder accepted it).
func JSON(js []byte) []byte {
	if jsonSafe(js) {
		return js
	}
	b := make([]byte, 0, len(js)+16)
	for i := 0; i < len(js); {
		r, size := utf8.DecodeRune(js[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			b = append(b, `\ufffd`...)
		case r == 0x7f || r >= 0x80 && IsControl(r):
			b = fmt.Appendf(b, `\u%04x`, r)
		default:
			b = append(b, js[i:i+size]...)
		}
		i += size
	}
	return b
}

// jsonSafe says whether js has neither DEL, a C1 control nor a byte that
// is not UTF-8.
func jsonSafe(js []byte) bool {
	for i := 0; i < len(js); {
		if js[i] < utf8.RuneSelf {
			if js[i] == 0x7f {
				return false
			}
			i++
			continue
		}
		r, size := utf8.DecodeRune(js[i:])
		if r == utf8.RuneError && size == 1 || IsControl(r) {
			return false
		}
		i += size
	}
	return true
}
