package sshexec

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
)

// A command's Stdin reaches its script after its secrets (over SSH they
// share the session's stdin), and Mask hides more values in its output
// as secrets are hidden. A durable command takes no stdin.
func TestStdinAndMask(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			in := strings.Repeat("line of input\n", 50000) // 700 KiB: more than a pipe holds
			res, err := r.Run(context.Background(), hostexec.Command{
				Script:  `n=$(wc -c); echo "got $n bytes, secret $S"; echo "file line: hunter2-file"`,
				Secrets: map[string]string{"S": "topsecret"},
				Stdin:   strings.NewReader(in),
				Mask:    []string{"multi\nhunter2-file"},
			})
			if err != nil || res.ExitCode != 0 {
				t.Fatalf("run: %v %+v", err, res)
			}
			want := "got " + itoa(len(in)) + " bytes, secret ***\nfile line: ***\n"
			if res.Stdout != want {
				t.Errorf("stdout %q, want %q", res.Stdout, want)
			}
			_, err = r.RunAttempt(context.Background(), hostexec.Attempt{ID: "wf.1.create.f.n.1.run", Command: hostexec.Command{Script: "true", Stdin: strings.NewReader("x")}})
			if !errors.Is(err, cmdrun.ErrStdinDurable) {
				t.Errorf("a durable command with a stdin: %v", err)
			}
		})
	}
}
