package cmdrun

import (
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// written feeds chunks to an output and returns the lines it emitted and
// its tail.
func written(secrets map[string]string, maxLine int, marker string, chunks ...string) (lines []string, tail string, markers []string) {
	o := &Output{Stream: hostexec.Stdout, Mask: NewMasker(secrets), maxLine: maxLine,
		OnLine: func(_ hostexec.Stream, l string) { lines = append(lines, l) }}
	if marker != "" {
		o.Marker, o.OnMarker = marker, func(s string) { markers = append(markers, s) }
	}
	for _, c := range chunks {
		if n, err := o.Write([]byte(c)); n != len(c) || err != nil {
			panic("short write")
		}
	}
	o.Flush()
	return lines, o.String(), markers
}

// splits returns text cut in two at every byte position, and byte by byte.
func splits(text string) [][]string {
	var out [][]string
	for i := 0; i <= len(text); i++ {
		out = append(out, []string{text[:i], text[i:]})
	}
	var bytewise []string
	for i := range len(text) {
		bytewise = append(bytewise, text[i:i+1])
	}
	return append(out, bytewise)
}

func TestOutputMask(t *testing.T) {
	for _, tc := range []struct {
		name    string
		secrets map[string]string
		maxLine int
		text    string
		want    []string
	}{
		{name: "in a line", secrets: map[string]string{"S": "hunter2"},
			text: "pw=hunter2 ok\nnext hunter2\nhunter2", want: []string{"pw=*** ok", "next ***", "***"}},
		{name: "twice and touching", secrets: map[string]string{"S": "ab"},
			text: "abab xab\n", want: []string{"****** x***"}},
		{name: "overlapping itself", secrets: map[string]string{"S": "aa"},
			text: "aaa b\n", want: []string{"*** b"}},
		{name: "one contains the other", secrets: map[string]string{"A": "pass", "B": "password"},
			text: "my password, my pass\n", want: []string{"my ***, my ***"}},
		{name: "overlapping secrets", secrets: map[string]string{"A": "abcd", "B": "cdef"},
			text: "xxabcdefyy abcd cdef\n", want: []string{"xx***yy *** ***"}},
		{name: "several lines", secrets: map[string]string{"K": "-----BEGIN\nkeybody\n-----END"},
			text: "-----BEGIN\nkeybody\n-----END\nsays keybody\n", want: []string{"***", "***", "***", "says ***"}},
		{name: "no secret in the text", secrets: map[string]string{"S": "zzz"},
			text: "plain\n\nline\n", want: []string{"plain", "", "line"}},
		{name: "at a long-line cut", secrets: map[string]string{"S": "SECRET"}, maxLine: 8,
			text: "0123456SECRET89abcdefSECRETxyz\nend", want: []string{"0123456***89abcdef***xyz", "end"}},
		{name: "overlapping at a cut", secrets: map[string]string{"A": "abcd", "B": "cdef"}, maxLine: 4,
			text: "0abcdef1abcdef\n", want: []string{"0***1***"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, chunks := range splits(tc.text) {
				lines, tail, _ := written(tc.secrets, tc.maxLine, "", chunks...)
				// where a long line is cut depends on the chunks: compare
				// what the lines make up
				if tc.maxLine > 0 {
					got, want := strings.Join(lines, ""), strings.Join(tc.want, "")
					if got != want || strings.ReplaceAll(tail, "\n", "") != want {
						t.Fatalf("chunks %q: lines %q tail %q, want %q", chunks, lines, tail, want)
					}
				} else if !slices.Equal(lines, tc.want) || tail != strings.Join(tc.want, "\n")+"\n" {
					t.Fatalf("chunks %q: lines %q tail %q, want %q", chunks, lines, tail, tc.want)
				}
				for _, v := range tc.secrets {
					for piece := range strings.SplitSeq(v, "\n") {
						if strings.Contains(tail, piece) || slices.ContainsFunc(lines, func(l string) bool { return strings.Contains(l, piece) }) {
							t.Fatalf("chunks %q: %q shows in %q / %q", chunks, piece, lines, tail)
						}
					}
				}
			}
		})
	}
}

// The process group marker is read before masking: a secret that happens
// to be part of it does not hide it, and it never shows as a line.
func TestOutputMaskMarker(t *testing.T) {
	text := hostsh.PIDMarker + "4242 /home/u/.gantry/attempts/a\nsecret 4242\n"
	for _, chunks := range splits(text) {
		lines, tail, markers := written(map[string]string{"S": "4242"}, 0, hostsh.PIDMarker, chunks...)
		if !slices.Equal(markers, []string{"4242 /home/u/.gantry/attempts/a"}) || !slices.Equal(lines, []string{"secret ***"}) || tail != "secret ***\n" {
			t.Fatalf("chunks %q: markers %q lines %q tail %q", chunks, markers, lines, tail)
		}
	}
}

// Without secrets a long line is cut where it is, as before.
func TestOutputLongLineWithoutSecrets(t *testing.T) {
	lines, _, _ := written(nil, 4, "", "0123", "456", "789\n")
	if !slices.Equal(lines, []string{"0123456", "789"}) {
		t.Fatalf("lines %q", lines)
	}
}

// naiveMask is the masking rule spelled out: every occurrence of every
// piece (a secret's lines), occurrences that overlap hidden as one.
func naiveMask(line string, pieces []string) string {
	var spans [][2]int
	for i := range len(line) {
		for _, p := range pieces {
			if strings.HasPrefix(line[i:], p) {
				spans = append(spans, [2]int{i, i + len(p)})
			}
		}
	}
	slices.SortStableFunc(spans, func(a, b [2]int) int { return a[0] - b[0] })
	var b strings.Builder
	at, end := 0, -1
	for _, s := range spans {
		if s[0] < end {
			end = max(end, s[1])
			continue
		}
		if end >= 0 {
			b.WriteString(Masked)
			at = end
		}
		b.WriteString(line[at:s[0]])
		end = s[1]
	}
	if end >= 0 {
		b.WriteString(Masked)
		at = end
	}
	b.WriteString(line[at:])
	return b.String()
}

// FuzzOutputMask writes random text in random chunks: no secret ever shows
// in a line or in the tail, and the lines make up exactly the text with
// its secrets masked, however it was chunked and wherever long lines were
// cut.
func FuzzOutputMask(f *testing.F) {
	f.Add("pw=hunter2 ok\nhunter2", "hunter2", "", []byte{1, 2, 3}, uint8(0))
	f.Add("0123456SECRET89abcdefSECRETxyz\nend", "SECRET", "ETx", []byte{5}, uint8(8))
	f.Add("xxabcdefyy abcd cdef\n", "abcd", "cdef", []byte{1}, uint8(3))
	f.Add("aaaaaaaaaaaaaaaaaaaaaaa\n", "aa", "aaaaa", []byte{2, 7}, uint8(1))
	f.Add("key:\nline1\nline2\n", "line1\nline2", "x", []byte{4, 1}, uint8(2))
	f.Fuzz(func(t *testing.T, text, s1, s2 string, chunking []byte, maxLine uint8) {
		if len(text) > 512 || strings.Contains(s1+s2, Masked[:1]) || s1 == "" {
			return // the tail must hold it all; a secret made of '*' would show in "***"
		}
		secrets := map[string]string{"S1": s1}
		if s2 != "" {
			secrets["S2"] = s2
		}
		var pieces []string
		for _, v := range secrets {
			for p := range strings.SplitSeq(v, "\n") {
				if p != "" {
					pieces = append(pieces, p)
				}
			}
		}
		var chunks []string
		for rest, i := text, 0; rest != ""; i++ {
			n := 1
			if len(chunking) > 0 {
				n = int(chunking[i%len(chunking)])%17 + 1
			}
			n = min(n, len(rest))
			chunks = append(chunks, rest[:n])
			rest = rest[n:]
		}
		lines, tail, _ := written(secrets, int(maxLine%65), "", chunks...)
		var want []string // the text's lines, masked
		for l := range strings.SplitSeq(strings.TrimSuffix(text, "\n"), "\n") {
			want = append(want, naiveMask(l, pieces))
		}
		got := strings.Join(lines, "")
		if got != strings.Join(want, "") {
			t.Fatalf("chunks %q maxLine %d: lines %q, want %q", chunks, maxLine%65, lines, want)
		}
		if strings.ReplaceAll(tail, "\n", "") != got {
			t.Fatalf("tail %q, lines %q", tail, lines)
		}
		for _, p := range pieces {
			shows := func(l string) bool { return strings.Contains(l, p) }
			if slices.ContainsFunc(want, shows) || slices.ContainsFunc(lines, shows) || shows(tail) {
				t.Fatalf("secret %q shows: lines %q tail %q", p, lines, tail)
			}
		}
	})
}
