package formula

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

// A secret output is masked in an output tail wherever it is whole, and,
// in a tail that was cut, also where the cut began inside it: its end
// stayed in the node's event ("…ETtoken" of "SECRETtoken").
func TestMaskTail(t *testing.T) {
	const secret = "hunter2SECRET"
	long := strings.Repeat("x", events.MaxTailBytes)
	cut := func(s string) string { return events.BoundTail(s, events.MaxTailBytes) }
	for _, c := range []struct{ name, tail, want string }{
		{"whole", "token=" + secret + " ok", "token=*** ok"},
		{"short tail starting like the secret's end", "ET is a word", "ET is a word"},
		{"cut inside the secret", cut(secret + long[:events.MaxTailBytes-5]), "***" + long[:events.MaxTailBytes-5]},
		{"cut inside, and whole later", cut("…" + secret + long[:events.MaxTailBytes-len(secret)-4] + secret), ""},
	} {
		got := maskTail(c.tail, []string{secret})
		if strings.Contains(got, "SECRET") || strings.Contains(got, "ET"+long[:3]) {
			t.Errorf("%s: %q… keeps a piece of the secret", c.name, got[:min(len(got), 40)])
		}
		if c.want != "" && got != c.want {
			t.Errorf("%s: %.40q…, want %.40q…", c.name, got, c.want)
		}
	}
}

// Several secret outputs: a whole copy of one masked first does not make
// the tail look uncut to the next (the end of the second, where the cut
// began, stayed).
func TestMaskTailSeveralSecrets(t *testing.T) {
	a, b := "alphaSECRETvalue-one", "bravoSECRETvalue-two"
	out := b + strings.Repeat("x", events.MaxTailBytes-30) + a
	tail := events.BoundTail(out, events.MaxTailBytes)
	for _, order := range [][]string{{a, b}, {b, a}} {
		if got := maskTail(tail, order); strings.Contains(got, "SECRET") || strings.Contains(got, "value-") {
			t.Errorf("masked %v: tail starts %.30q…, ends …%q: a piece of a secret is kept", order, got, got[max(0, len(got)-30):])
		}
	}
}
