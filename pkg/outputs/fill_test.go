package outputs

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

func storeWith(t *testing.T, values map[string]string, secret ...string) *eventbustest.MemoryBucket[events.OutputRecord] {
	t.Helper()
	s := &eventbustest.MemoryBucket[events.OutputRecord]{}
	rec := events.OutputRecord{WorkflowID: "w1", Values: values, Secret: secret}
	if err := Save(context.Background(), s, events.OutputKey("k8s", "cp", "init"), rec); err != nil {
		t.Fatal(err)
	}
	return s
}

func ref(name string, secret bool, quote int) string {
	return dag.OutputRef{Formula: "cp", Node: "init", Name: name, Secret: secret, Quote: quote}.Marker()
}

// sh runs script in sh with env, and returns what it prints.
func sh(t *testing.T, script string, env map[string]string) string {
	t.Helper()
	cmd := exec.Command("/bin/sh", "-c", script)
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v: %s", script, err, out)
	}
	return string(out)
}

func TestFillScript(t *testing.T) {
	tricky := `it's "x" $(y) a  b`
	s := storeWith(t, map[string]string{"join_cmd": "echo joined", "quote": tricky, "token": tricky}, "token")
	f := &Filler{Store: s, Workflow: "k8s"}
	script := ref("join_cmd", false, 0) + "; printf '%s|' '" + ref("quote", false, 1) + "' '" + ref("token", true, 1) + "' \"" + ref("token", true, 0) + "\""
	got, err := f.Script(context.Background(), script)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(got, "it's") {
		t.Errorf("a secret value is in the script's text: %s", got)
	}
	env, secret := map[string]string{}, map[string]string{}
	f.Secrets(env, secret)
	if len(secret) != 1 || secret[SecretVar+"1"] != tricky {
		t.Fatalf("secrets %q, want the token in %s1", secret, SecretVar)
	}
	if out := sh(t, got, secret); out != "joined\n"+tricky+"|"+tricky+"|"+tricky+"|" {
		t.Errorf("the script printed %q", out)
	}
	if vals := f.SecretValues(); len(vals) != 1 || vals[0] != tricky {
		t.Errorf("secret values %q", vals)
	}
}

func TestFillEnv(t *testing.T) {
	s := storeWith(t, map[string]string{"join_cmd": "j", "token": "t0k"}, "token")
	f := &Filler{Store: s, Workflow: "k8s"}
	secret := map[string]string{}
	env, err := f.Env(context.Background(), map[string]string{"J": "cmd: " + ref("join_cmd", false, 0), "T": "Bearer " + ref("token", true, 0), "P": "plain"}, secret)
	if err != nil {
		t.Fatal(err)
	}
	if env["J"] != "cmd: j" || env["P"] != "plain" || secret["T"] != "Bearer t0k" {
		t.Errorf("env %q, secret %q", env, secret)
	}
	if _, ok := env["T"]; ok {
		t.Error("an env value reading a secret output stayed plain")
	}
}

func TestFillMissing(t *testing.T) {
	s := storeWith(t, map[string]string{"join_cmd": "j"})
	f := &Filler{Store: s, Workflow: "k8s"}
	_, err := f.Script(context.Background(), "x "+ref("ca", false, 0))
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "cp/init ca: node cp/init did not write ca to $GANTRY_OUTPUT") {
		t.Errorf("got %v", err)
	}
	f = &Filler{Store: s, Workflow: "other"}
	_, err = f.Script(context.Background(), ref("join_cmd", false, 0))
	if !errors.Is(err, ErrMissing) || !strings.Contains(err.Error(), "node cp/init has stored no outputs") {
		t.Errorf("got %v", err)
	}
}
