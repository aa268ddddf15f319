package sshexec

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// A script as large as dag.MaxScript lets through runs on a real host, in
// a host agent, in a session supervisor (the path of a re-attach, or when
// no agent answers) and as a plain command, with single quotes in it: the
// host's shell gets it as one argument, quoted once or twice, and a limit
// on its bytes alone let scripts of half the size through that failed
// "Argument list too long".
func TestAScriptAtTheLimitRuns(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	r := newPool(t, f, f.KnownHosts).Runner(f.Hosts[0].Addr, "")
	line := "echo 'a' >/dev/null\n"
	script := strings.Repeat(line, (dag.MaxScript-len("echo done\n"))/dag.ScriptArgSize(line)) + "echo done\n"
	if why := dag.ScriptTooLarge(dag.ScriptArgSize(script)); why != "" || dag.ScriptArgSize(script) < dag.MaxScript-dag.ScriptArgSize(line) {
		t.Fatalf("the script is not at the limit: %d of %d: %s", dag.ScriptArgSize(script), dag.MaxScript, why)
	}
	for _, c := range []struct {
		name string
		r    hostexec.AttemptRunner
		id   string
	}{{"agent", r, "big-agent"}, {"session", sessionSupervised(r), "big-session"}, {"plain", r, ""}} {
		t.Run(c.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			res, err := runAs(ctx, c.r, hostexec.Attempt{Command: hostexec.Command{Script: script}, ID: c.id})
			if err != nil || res.ExitCode != 0 || !strings.Contains(res.Stdout, "done") {
				t.Fatalf("a %d-byte script (%d once quoted): exit %d err %v stderr %.300q", len(script), dag.ScriptArgSize(script), res.ExitCode, err, res.Stderr)
			}
		})
	}
}
