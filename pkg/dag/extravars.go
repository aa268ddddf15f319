package dag

import (
	"maps"
	"strings"
)

// Extra vars are what gantry's --var k=v and --var-file FILE give: they
// win over the composition's vars and every host's own (an inventory's
// included), as Ansible's -e does. The CLI writes them into the
// composition it sends as extra_vars, so the workflow's record, its
// retries and its accepted event (ShownVars) see what was used.

// SecretLooking reports whether a var's name looks like it holds a
// secret (password, token, key, ...): its value is never shown.
func SecretLooking(name string) bool {
	n := strings.ToLower(name)
	for _, w := range []string{"pass", "secret", "token", "key", "cred", "auth", "private", "cert", "session", "cookie", "signature"} {
		if strings.Contains(n, w) {
			return true
		}
	}
	return false
}

// Masked is what is shown for the value of a secret-looking var.
const Masked = "***"

// ShownVars is vars as they may be shown (in events, gantry status): the
// value of each secret-looking name replaced by Masked. Nil for none.
func ShownVars(vars map[string]string) map[string]string {
	if len(vars) == 0 {
		return nil
	}
	out := maps.Clone(vars)
	for k := range out {
		if SecretLooking(k) {
			out[k] = Masked
		}
	}
	return out
}
