package transport

import (
	"context"
	"errors"
	"flag"
	"path/filepath"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
)

// Transport local runs only on a worker started to allow it, and the
// refusal says how.
func TestHostsLocalAllowed(t *testing.T) {
	r, err := NewHosts(HostsConfig{}).Runner(Target{Transport: "local"})
	if !errors.Is(err, ErrLocalNotAllowed) || !strings.Contains(err.Error(), "--allow-local") || r != nil {
		t.Fatalf("runner %v, err %v: want ErrLocalNotAllowed naming --allow-local", r, err)
	}
	r, err = NewHosts(HostsConfig{AllowLocal: true}).Runner(Target{Transport: "local"})
	if err != nil {
		t.Fatal(err)
	}
	if res, err := r.Run(context.Background(), hostexec.Command{Script: "echo here"}); err != nil || res.Stdout != "here\n" {
		t.Fatalf("allowed: %+v %v", res, err)
	}
}

// --allow-local is off unless given (its variable, GANTRY_ALLOW_LOCAL,
// is applied by the services' main: internal/servicemain).
func TestHostsConfigFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want bool
	}{
		{nil, false},
		{[]string{"--allow-local"}, true},
		{[]string{"--allow-local=false"}, false},
	} {
		var c HostsConfig
		fs := flag.NewFlagSet("worker", flag.ContinueOnError)
		c.RegisterFlags(fs)
		if err := fs.Parse(append([]string{"--ssh-key", "/k", "--ssh-user", "deploy"}, tc.args...)); err != nil {
			t.Fatal(err)
		}
		if c.AllowLocal != tc.want || c.SSH.KeyFile != "/k" || c.SSH.DefaultUser != "deploy" {
			t.Errorf("%q: AllowLocal %v (want %v), ssh key %q, user %q", tc.args, c.AllowLocal, tc.want, c.SSH.KeyFile, c.SSH.DefaultUser)
		}
	}
}

// --local-prestart is on unless turned off; it gives the local runner its
// own warm shells and spare files, and off, a runner that makes nothing
// ahead of need (what each makes: hostexec's TestPrestartOption).
func TestLocalPrestartOption(t *testing.T) {
	var c HostsConfig
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	c.RegisterFlags(fs)
	if err := fs.Parse(nil); err != nil || !c.LocalPrestart {
		t.Fatalf("--local-prestart by default: %v %v, want on", c.LocalPrestart, err)
	}
	c.AllowLocal = true
	for _, on := range []bool{true, false} {
		c.LocalPrestart = on
		r, err := NewHosts(c).Runner(Target{Transport: "local"})
		if err != nil {
			t.Fatal(err)
		}
		l, ok := r.(localexec.Local)
		if !ok || l.Prestarts() != on {
			t.Fatalf("--local-prestart=%v: runner %#v", on, r)
		}
		base := filepath.Join(t.TempDir(), "attempts")
		res, err := l.Run(context.Background(), hostexec.Command{Attempt: "w.1.create.f.n.1.run", Lock: "c.f.n", Env: map[string]string{"GANTRY_ATTEMPTS": base}, Script: "echo ran"})
		if err != nil || res.Stdout != "ran\n" {
			t.Fatalf("--local-prestart=%v: %+v %v", on, res, err)
		}
	}
}
