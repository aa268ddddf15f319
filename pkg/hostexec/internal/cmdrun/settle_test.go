package cmdrun

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// A settle's tail is cut from the output file; a cut inside a secret
// leaves its end, which whole-value masking does not see.
func TestMaskTailHidesTheEndOfASecretTheCutBeganInside(t *testing.T) {
	const secret = "hunter2-VERY-SECRET"
	m := NewMasker(map[string]string{"P": secret}, "line one of a key\nline two of a key")
	fill := func(head string) []byte {
		return []byte(head + strings.Repeat("x", hostsh.MaxTail-len(head)))
	}
	cases := map[string]struct {
		tail []byte
		want string // the start of the masked tail
	}{
		"cut inside the secret":         {fill(secret[7:] + " rest"), "*** rest"},
		"cut inside a line of a key":    {fill("two of a key\nok"), "***\nok"},
		"cut just after a secret":       {fill(" rest"), " rest"},
		"whole secret at the start":     {fill(secret + " rest"), "*** rest"},
		"a short tail is not cut":       {[]byte(secret[7:] + " rest"), secret[7:] + " rest"},
		"a whole copy further on":       {fill("a " + secret), "a ***"},
		"a one-byte end of the secret":  {fill("T rest"), "*** rest"},
		"unrelated text stays as it is": {fill("plain text"), "plain text"},
	}
	for name, c := range cases {
		got := maskTail(m, c.tail)
		if !strings.HasPrefix(got, c.want) {
			t.Errorf("%s: %.40q, want it to start %q", name, got, c.want)
		}
	}
}
