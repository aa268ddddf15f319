package cli

import (
	"bytes"
	"context"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/internal/servicemain"
	executor "github.com/gantry-dev/gantry/services/executor/service"
	healthgate "github.com/gantry-dev/gantry/services/health-gate/service"
	planner "github.com/gantry-dev/gantry/services/planner/service"
	statestore "github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/spf13/pflag"
)

// TestDevDataDirInSharedTemp: with no home directory, `gantry dev` keeps
// its data, the operator's key among it, under the shared temporary
// directory. Another local user may have made that directory first: dev
// refuses a symlink or someone else's directory, and tightens its own to
// 0700, before it writes a key. The trap is set at the per-user name and at
// the shared name gantry-dev that dev used before. dev runs with a
// --metrics address that cannot listen, so it stops right after writing
// its keys and starting NATS (on loopback).
func TestDevDataDirInSharedTemp(t *testing.T) {
	for _, tc := range []struct {
		name     string
		root     bool
		setup    func(t *testing.T, dir, other string)
		wantCode int
		wantErr  string
		check    func(t *testing.T, dir, other string)
	}{
		{
			name:     "symlink at the data dir is refused",
			setup:    func(t *testing.T, dir, other string) { must(t, os.Symlink(other, dir)) },
			wantCode: ExitProblem,
			wantErr:  "is a symlink",
			check: func(t *testing.T, dir, other string) {
				if ents, _ := os.ReadDir(other); len(ents) != 0 {
					t.Errorf("wrote through the symlink into %s: %v", other, ents)
				}
			},
		},
		{
			name: "data dir owned by another user is refused",
			root: true,
			setup: func(t *testing.T, dir, other string) {
				mustMkdir(t, dir)
				must(t, os.Chmod(dir, 0o777))
				must(t, os.Chown(dir, nobody, nobody))
			},
			wantCode: ExitProblem,
			wantErr:  "owned by uid 65534, not you",
			check: func(t *testing.T, dir, other string) {
				for _, d := range []string{dir, filepath.Join(filepath.Dir(dir), "gantry-dev")} {
					if _, err := os.Lstat(filepath.Join(d, "auth")); err == nil {
						t.Errorf("wrote keys in %s, which uid %d owns", d, nobody)
					}
				}
			},
		},
		{
			name: "our 0777 data dir is tightened to 0700",
			setup: func(t *testing.T, dir, other string) {
				mustMkdir(t, dir)
				must(t, os.Chmod(dir, 0o777))
			},
			wantCode: ExitUsage, // the --metrics address
			wantErr:  "--metrics",
			check: func(t *testing.T, dir, other string) {
				wantMode(t, dir, 0o700)
				wantRegular(t, filepath.Join(dir, "auth", "operator.nk"))
			},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root {
				needRoot(t)
			}
			tmp := t.TempDir()
			t.Setenv("TMPDIR", tmp)
			t.Setenv("HOME", "")
			t.Setenv("XDG_DATA_HOME", "")
			t.Setenv("XDG_RUNTIME_DIR", t.TempDir())
			other := t.TempDir()
			must(t, os.Chmod(other, 0o777))
			dir := filepath.Join(tmp, "gantry-dev-"+uidString())
			for _, d := range []string{dir, filepath.Join(tmp, "gantry-dev")} {
				tc.setup(t, d, other)
			}
			code, _, errOut := run(t, "dev", "--port", "0", "--metrics", "127.0.0.1:99999", "--log-level", "error")
			if code != tc.wantCode || !strings.Contains(errOut, tc.wantErr) {
				t.Errorf("gantry dev: exit %d, %q; want %d and %q", code, errOut, tc.wantCode, tc.wantErr)
			}
			if tc.wantCode == ExitProblem && !strings.Contains(errOut, dir) {
				t.Errorf("gantry dev: %q does not name %s", errOut, dir)
			}
			tc.check(t, dir, other)
		})
	}
}

// Once interrupted, gantry dev says it is stopping and ends within
// DevStopWait whatever still waits (exit 130); a stop in time exits
// nothing, and a context ended for another reason says nothing.
func TestBoundStop(t *testing.T) {
	for _, c := range []struct {
		name        string
		interrupt   bool // the signal context ends while its parent does not
		stopsAfter  time.Duration
		wantExit    int // -1: none
		wantMessage string
	}{
		{"stops in time", true, 10 * time.Millisecond, -1, "stopping: finishing the work in flight (at most 200ms; interrupt again to stop at once)"},
		{"still waiting", true, time.Hour, ExitInterrupted, "not stopped after 200ms: stopping now"},
		{"not interrupted", false, 10 * time.Millisecond, -1, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			parent, cancelParent := context.WithCancel(context.Background())
			defer cancelParent()
			ctx, cancel := context.WithCancel(parent)
			defer cancel()
			if c.interrupt {
				cancel()
			} else {
				cancelParent()
			}
			stopped := make(chan struct{})
			time.AfterFunc(c.stopsAfter, func() { close(stopped) })
			var out bytes.Buffer
			exited := -1
			restored := false
			boundStop(ctx, parent, func() { restored = true }, stopped, &out, 200*time.Millisecond, func(code int) { exited = code })
			if exited != c.wantExit {
				t.Errorf("exit %d, want %d", exited, c.wantExit)
			}
			if c.wantMessage == "" && out.Len() > 0 || !strings.Contains(out.String(), c.wantMessage) {
				t.Errorf("said %q, want %q", out.String(), c.wantMessage)
			}
			if restored != c.interrupt {
				t.Errorf("signal default restored: %v, want %v", restored, c.interrupt)
			}
		})
	}
}

// gantry dev takes every flag each service declares (it used to
// re-declare some and lack --labels, --concurrency and --identity-names):
// all the executor's, the planner's, the health-gate's and the
// state-store's, but the NATS connection's (it runs its own server).
func TestDevTakesEveryServiceFlag(t *testing.T) {
	dev := newDevCmd()
	configs := map[string]servicemain.Config{"executor": &executor.Config{}, "planner": &planner.Config{},
		"health-gate": &healthgate.Config{}, "state-store": &statestore.Config{}}
	n := 0
	for name, c := range configs {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.RegisterFlags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			n++
			if dev.Flags().Lookup(f.Name) == nil {
				t.Errorf("gantry dev has no --%s, which the %s takes", f.Name, name)
			}
		})
	}
	if n < 20 {
		t.Errorf("only %d service flags seen", n)
	}
}

// A flag the executor and the health-gate both take sets both; a flag not
// given takes its variable, as in the services; --allow-local is on unless
// turned off; the services' checks apply.
func TestDevServiceFlagsSetTheServices(t *testing.T) {
	var d devServices
	fs := pflag.NewFlagSet("dev", pflag.ContinueOnError)
	fs.AddGoFlagSet(d.flags())
	if err := fs.Parse([]string{"--ssh-key", "/k", "--labels", "zone=eu-1", "--concurrency", "5", "--retention-keep", "3"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"GANTRY_SECRETS_DIR": "/secrets", "GANTRY_SSH_KEY": "/env/key", "GANTRY_MAX_FORMULAS": "7"}
	if err := d.configure(func(k string) (string, bool) { v, ok := env[k]; return v, ok }, fs.Changed); err != nil {
		t.Fatal(err)
	}
	x, g := d.executor, d.healthGate
	if x.Hosts.SSH.KeyFile != "/k" || g.Hosts.SSH.KeyFile != "/k" || x.SecretsDir != "/secrets" || g.SecretsDir != "/secrets" ||
		!x.Hosts.AllowLocal || !g.Hosts.AllowLocal || x.Labels["zone"] != "eu-1" || x.MaxFormulas != 7 || g.Concurrency != 5 || d.planner.Retention.Keep != 3 {
		t.Errorf("executor %+v\nhealth-gate %+v\nplanner %+v", x, g, d.planner)
	}
	var bad devServices
	fs = pflag.NewFlagSet("dev", pflag.ContinueOnError)
	fs.AddGoFlagSet(bad.flags())
	_ = fs.Parse([]string{"--labels", "rack"})
	if err := bad.configure(func(string) (string, bool) { return "", false }, fs.Changed); err == nil || !strings.Contains(err.Error(), "--labels") {
		t.Errorf("bad --labels: %v", err)
	}
}

// TestDevPortInUse: gantry dev on a port another process listens on says
// so at once, naming the port, instead of waiting for a server that never
// becomes ready.
func TestDevPortInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := strconv.Itoa(ln.Addr().(*net.TCPAddr).Port)
	began := time.Now()
	code, _, errOut := run(t, "dev", "--port", port, "--data-dir", t.TempDir())
	took := time.Since(began)
	if code != ExitProblem || !strings.Contains(errOut, "address already in use") || !strings.Contains(errOut, "port "+port) {
		t.Errorf("exit %d: %s", code, errOut)
	}
	if took > 10*time.Second {
		t.Errorf("took %s to say the port is in use", took.Round(time.Millisecond))
	}
}

// A second gantry dev on a data dir that one uses is refused, naming the
// directory (it started: two JetStream servers on one store); the lock
// is given back when the first ends.
func TestDevRefusesADataDirInUse(t *testing.T) {
	dir := t.TempDir()
	unlock, err := lockDataDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	code, _, errOut := run(t, "dev", "--port", "0", "--data-dir", dir)
	if code != ExitProblem || !strings.Contains(errOut, "another gantry dev runs on the data dir "+dir) {
		t.Fatalf("exit %d: %s", code, errOut)
	}
	unlock()
	again, err := lockDataDir(dir)
	if err != nil {
		t.Fatalf("the lock given back is not taken again: %v", err)
	}
	again()
}
