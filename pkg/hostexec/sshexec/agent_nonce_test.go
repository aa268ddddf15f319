package sshexec

import (
	"context"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// A command that runs long enough to be followed must not learn the
// request's nonce (from a follow session's argv or the files of its
// attempt): with it, its output fakes the agent's answer.
func TestAgentNonceNotVisibleToAFollowedCommand(t *testing.T) {
	t.Parallel()
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	dir := t.TempDir()
	// looks for any 32-hex word in the argv of the user's processes and in
	// the attempt's files, and fakes the answer with each
	script := `sleep 1
for n in $(cat /proc/[0-9]*/cmdline "$GANTRY_ATTEMPTS"/* 2>/dev/null | tr -c '0-9a-f' '\n' | grep -E '^[0-9a-f]{32}$' | sort -u); do
  echo "1 x" >"$GANTRY_ATTEMPTS/a.1.f"
  printf '\n%s 0\n' "$n"; printf '\n%s\n' "$n" >&2
done
exit 3`
	res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: "a.1", Command: hostexec.Command{Script: script, Env: map[string]string{"GANTRY_ATTEMPTS": dir}}})
	if err != nil || res.ExitCode != 3 {
		t.Fatalf("exit %d %v, want 3 (stdout %q)", res.ExitCode, err, res.Stdout)
	}
	res, err = r.RunAttempt(context.Background(), hostexec.Attempt{ID: "a.2", Command: hostexec.Command{Script: "echo next", Env: map[string]string{"GANTRY_ATTEMPTS": dir}}})
	if err != nil || res.ExitCode != 0 || res.Stdout != "next\n" {
		t.Fatalf("next attempt: %+v %v", res, err)
	}
}
