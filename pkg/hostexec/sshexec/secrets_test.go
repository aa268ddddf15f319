package sshexec

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/hostsh"
)

// secretValue is a value nothing else on this machine holds.
func secretValue(t *testing.T) string {
	t.Helper()
	b := make([]byte, 8)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "s3cr3t-" + hex.EncodeToString(b)
}

// withSecrets runs cmd through r, plain and as a durable attempt (whose
// environment also sets GANTRY_ATTEMPTS, which must keep working).
func withSecrets(t *testing.T, r hostexec.AttemptRunner, cmd hostexec.Command, check func(t *testing.T, res hostexec.Result, lines []string)) {
	t.Helper()
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			c := hostexec.Attempt{Command: cmd}
			dir := filepath.Join(t.TempDir(), "attempts")
			if durable {
				c.ID = "w1.1.f.n.1"
				c.Env = maps.Clone(c.Env)
				if c.Env == nil {
					c.Env = map[string]string{}
				}
				c.Env["GANTRY_ATTEMPTS"] = dir
			}
			var mu sync.Mutex
			var lines []string
			c.OnLine = func(s hostexec.Stream, l string) { mu.Lock(); lines = append(lines, string(s)+":"+l); mu.Unlock() }
			res, err := runAs(context.Background(), r, c)
			if err != nil {
				t.Fatal(err)
			}
			check(t, res, lines)
			if durable { // the attempt ran under the directory the environment named
				if _, err := os.Stat(filepath.Join(dir, c.ID+".run")); err != nil {
					t.Fatalf("GANTRY_ATTEMPTS not honoured: %v", err)
				}
			}
		})
	}
}

// hexOf is what `od -An -tx1 | tr -d ' \n'` prints for s.
func hexOf(s string) string { return hex.EncodeToString([]byte(s)) }

// printHex prints $S in hex: the test sees what the command received
// without the output showing the value.
const printHex = `printf '%s' "$S" | od -An -tx1 | tr -d ' \n'; echo`

// A secret is set for the command, and wherever it shows in the output,
// even split across writes (and so across the transport's chunks), the
// lines and the tails show *** instead.
func TestSecretsMasked(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			v := secretValue(t)
			cmd := hostexec.Command{
				Script:  `printf '%s' "${S%???}"; sleep 0.2; printf '%s\n' "${S#"${S%???}"}"; echo "$S" >&2; ` + printHex,
				Secrets: map[string]string{"S": v},
			}
			withSecrets(t, r, cmd, func(t *testing.T, res hostexec.Result, lines []string) {
				if res.ExitCode != 0 || res.Stdout != "***\n"+hexOf(v)+"\n" || res.Stderr != "***\n" {
					t.Fatalf("result %+v", res)
				}
				slices.Sort(lines)
				if want := []string{"stderr:***", "stdout:***", "stdout:" + hexOf(v)}; !slices.Equal(lines, want) {
					t.Fatalf("lines %q, want %q", lines, want)
				}
			})
		})
	}
}

// Values that a shell would take apart (quotes, $, backslashes, newlines,
// leading and trailing blanks) arrive as they were given, next to plain
// environment variables.
func TestSecretsArriveIntact(t *testing.T) {
	values := []string{
		"it's",
		`'`,
		`a "b" $HOME ${X} $(id) ` + "`id`" + ` \$ \\ \n end\`,
		"two\nlines",
		"\nnewlines\n\naround\n",
		"  blanks\tand tabs  ",
		"ünïcödé ☃",
		`set --; unset S; exit 9`,
	}
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			for i, v := range values {
				t.Run(fmt.Sprint(i), func(t *testing.T) {
					cmd := hostexec.Command{Script: printHex + `; echo "plain=$PLAIN"`,
						Env: map[string]string{"PLAIN": "p"}, Secrets: map[string]string{"S": v, "T": "other"}}
					withSecrets(t, r, cmd, func(t *testing.T, res hostexec.Result, _ []string) {
						if res.ExitCode != 0 || res.Stdout != hexOf(v)+"\nplain=p\n" {
							t.Fatalf("value %q: result %+v", v, res)
						}
					})
				})
			}
		})
	}
}

// The command's stdin is empty: the secrets' line, read before it starts,
// is all the session carried.
func TestSecretsCommandStdinEmpty(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			cmd := hostexec.Command{Script: `if IFS= read -r x; then echo "read: $x"; else echo "eof: $x"; fi`, Secrets: map[string]string{"S": "v"}}
			withSecrets(t, r, cmd, func(t *testing.T, res hostexec.Result, _ []string) {
				if res.ExitCode != 0 || res.Stdout != "eof: \n" {
					t.Fatalf("result %+v", res)
				}
			})
		})
	}
}

// While a command with a secret runs, no process on the host (this
// machine: the test sshd is local) has the value in its argv, and the
// command's processes have it in their environment.
func TestSecretsNotInArgv(t *testing.T) {
	for name, r := range runners(t) {
		t.Run(name, func(t *testing.T) {
			v := secretValue(t)
			cmd := hostexec.Command{Script: "sleep 1", Secrets: map[string]string{"GANTRY_TEST_SECRET": v}}
			scanWhileRunning(t, r, cmd, v)
		})
	}
}

func scanWhileRunning(t *testing.T, r hostexec.AttemptRunner, cmd hostexec.Command, v string) {
	env := []byte("GANTRY_TEST_SECRET=" + v + "\x00")
	for _, durable := range []bool{false, true} {
		t.Run(fmt.Sprintf("durable=%v", durable), func(t *testing.T) {
			c := hostexec.Attempt{Command: cmd}
			if durable {
				c.ID = "w1.1.f.n.scan"
				c.Env = map[string]string{"GANTRY_ATTEMPTS": t.TempDir()}
			}
			done := make(chan error, 1)
			go func() { _, err := runAs(context.Background(), r, c); done <- err }()
			inEnv := 0
			for scanning := true; scanning; {
				select {
				case err := <-done:
					if err != nil {
						t.Fatal(err)
					}
					scanning = false
				default:
				}
				dirs, _ := filepath.Glob("/proc/[0-9]*")
				for _, d := range dirs {
					if b, err := os.ReadFile(d + "/cmdline"); err == nil && bytes.Contains(b, []byte(v)) {
						t.Fatalf("the secret is in the argv of %s: %q", d, strings.ReplaceAll(string(b), "\x00", " "))
					}
					if b, err := os.ReadFile(d + "/environ"); err == nil && bytes.Contains(b, env) {
						inEnv++
					}
				}
			}
			if inEnv == 0 {
				t.Fatal("no process had the secret in its environment while the command ran")
			}
		})
	}
}

// Secrets are checked before anything starts, and the errors never show
// a value.
func TestSecretsChecked(t *testing.T) {
	for name, r := range runners(t) {
		for _, tc := range []struct {
			cmd  hostexec.Command
			want string
		}{
			{hostexec.Command{Secrets: map[string]string{"BAD NAME": "hidden-1"}}, "not a valid"},
			{hostexec.Command{Secrets: map[string]string{"S": ""}}, "S is empty"},
			{hostexec.Command{Secrets: map[string]string{"S": "hidden\x00-2"}}, "NUL"},
			{hostexec.Command{Secrets: map[string]string{"S": "hidden-3"}, Env: map[string]string{"S": "x"}}, "both"},
		} {
			t.Run(name+"/"+tc.want, func(t *testing.T) {
				tc.cmd.Script = "echo ran"
				started := false
				tc.cmd.BeforeStart = func() error { started = true; return nil }
				_, err := r.Run(context.Background(), tc.cmd)
				if err == nil || !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "hidden") || started {
					t.Fatalf("err %v (started %v), want one saying %q without the value", err, started, tc.want)
				}
			})
		}
	}
}

// A secret is the command's environment and nothing else: one named
// GANTRY_ATTEMPTS or HOME reaches the command, but moves none of the
// attempt's files and changes nothing of how the attempt runs (over SSH
// in a host agent, asked at its turn like any other). Before, such a
// secret moved the attempts directory and sent the attempt the way of a
// session supervisor, where its Turn was never asked.
func TestSecretNamedLikeTheAttemptsDirChangesNothing(t *testing.T) {
	for name, r := range runners(t) {
		for _, secret := range []string{"GANTRY_ATTEMPTS", "HOME"} {
			t.Run(name+"/"+secret, func(t *testing.T) {
				home, decoy := t.TempDir(), t.TempDir()
				env := map[string]string{"HOME": home}
				base := filepath.Join(home, ".gantry", "attempts")
				if secret == "HOME" {
					base = filepath.Join(t.TempDir(), "attempts")
					env = map[string]string{"GANTRY_ATTEMPTS": base}
				}
				asked := 0
				for n := 1; n <= 2; n++ {
					id := fmt.Sprintf("w.%d.create.f.n.1.run", n)
					res, err := r.RunAttempt(context.Background(), hostexec.Attempt{ID: id, Lock: "c.f.n", Mark: "create.h1",
						Command: hostexec.Command{Env: env, Secrets: map[string]string{secret: decoy},
							Script: `[ "$` + secret + `" = ` + hostsh.Quote(decoy) + ` ] && echo sees-it`},
						Turn: func(hostexec.Holder) bool { asked++; return true }})
					if err != nil || res.ExitCode != 0 || res.Stdout != "sees-it\n" {
						t.Fatalf("attempt %d: %+v %v, want the command to see the secret", n, res, err)
					}
					if _, err := os.Stat(filepath.Join(base, id+".run")); err != nil {
						t.Errorf("attempt %d is not recorded in %s: %v", n, base, err)
					}
				}
				if es, _ := os.ReadDir(decoy); len(es) > 0 {
					t.Errorf("the secret's directory holds %d entries (%s...), want none", len(es), es[0].Name())
				}
				if asked != 1 {
					t.Errorf("Turn asked %d times, want once: the second attempt's last holder left the same mark and succeeded", asked)
				}
			})
		}
	}
}
