package transport

import (
	"context"
	"errors"
	"flag"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec"
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
