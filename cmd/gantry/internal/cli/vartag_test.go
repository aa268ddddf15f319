package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --var-file value with a YAML tag it does not fit is not quoted in the
// error (it was, for a secret-looking name too: "no error about a var ever
// shows a value", docs/composition.md); the error names the tag.
func TestVarFileTaggedValueNotShown(t *testing.T) {
	dir := varsDir(t)
	c := filepath.Join(dir, "c.yaml")
	for _, tag := range []string{"!!int", "!!float", "!!bool"} {
		f := filepath.Join(dir, "tagged.yaml")
		if err := os.WriteFile(f, []byte("api_token: "+tag+" hunter2SECRET\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		code, out, errOut := run(t, "validate", c, "--var-file", f)
		if strings.Contains(out+errOut, "hunter2SECRET") || code != ExitFailed || !strings.Contains(out+errOut, "a value tagged "+tag) {
			t.Errorf("validate --var-file (api_token: %s ...): exit %d, the error shows the value:\n%s%s", tag, code, out, errOut)
		}
	}
}
