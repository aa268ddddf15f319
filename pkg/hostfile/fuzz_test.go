package hostfile

import (
	"strings"
	"testing"
)

// FuzzParseProbe: whatever a host answers, a line is refused or read
// into an index within range and a known kind; a file has a full hash.
func FuzzParseProbe(f *testing.F) {
	for _, s := range []string{"0 missing", "1 nodir", "2 file 12 640 0 0 root root " + strings.Repeat("a", 64), "3 link", "0 file", "-1 dir", "9 other", "0 file 1 999 0 0 a b c"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		i, found, err := parseProbe(line, 4)
		if err != nil {
			return
		}
		if i < 0 || i >= 4 {
			t.Fatalf("index %d out of range", i)
		}
		switch found.Kind {
		case KindFile:
			if len(found.SHA256) != 64 {
				t.Fatalf("a file without a full hash: %+v", found)
			}
		case KindMissing, KindNoDir, KindLink, KindDir, KindOther:
		default:
			t.Fatalf("unknown kind %q", found.Kind)
		}
	})
}

// FuzzUnified: the edit script a diff is made of turns the old lines
// into the new ones.
func FuzzUnified(f *testing.F) {
	f.Add("a\nb\nc\n", "a\nc\nd\n")
	f.Add("", "x")
	f.Add("x\ny\nz\nx\n", "y\nx\n")
	f.Fuzz(func(t *testing.T, a, b string) {
		x, y := splitLines(a), splitLines(b)
		if len(x) > 200 || len(y) > 200 {
			return
		}
		ops, ok := edits(x, y, maxEdits)
		if !ok {
			t.Fatal("no edit script within the bound")
		}
		var got []string
		for _, o := range ops {
			switch o.kind {
			case ' ':
				if x[o.i] != y[o.j] {
					t.Fatalf("kept %q as %q", x[o.i], y[o.j])
				}
				got = append(got, x[o.i])
			case '+':
				got = append(got, y[o.j])
			}
		}
		if strings.Join(got, "") != b {
			t.Fatalf("the script makes %q, want %q", strings.Join(got, ""), b)
		}
	})
}
