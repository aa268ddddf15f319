package e2e

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// outputsDoc is a composition over two sshd hosts: cp/init on a writes
// outputs (the secret token from a file on a), w/join on b reads them in
// its command, its env and its health gate.
func outputsDoc(s *stack, name, join string) []byte {
	a, b := s.fleet.Hosts[0], s.fleet.Hosts[1]
	doc := `name: ` + name + `
hosts:
  a: {address: "` + a.Addr + `", user: ` + s.fleet.User + `}
  b: {address: "` + b.Addr + `", user: ` + s.fleet.User + `}
formulas:
  - id: cp
    server: a
    nodes:
      - name: init
        outputs: [join_cmd, ca, {name: token, secret: true}]
        run: |
          echo init >> ` + a.Dir + `/ran
          echo "join_cmd=echo joined $(cat ` + a.Dir + `/version)" >> "$GANTRY_OUTPUT"
          printf 'ca<<EOF\nline one\nline '"'"'two'"'"'\nEOF\n' >> "$GANTRY_OUTPUT"
          echo "token=$(cat ` + a.Dir + `/token)" >> "$GANTRY_OUTPUT"
  - id: w
    server: b
    nodes:
      - name: join
        env: {CA: '{{ output "cp/init" "ca" }}', AUTH: 'Bearer {{ output "cp/init" "token" }}'}
        run: |
          ` + join + `
          {{ output "cp/init" "join_cmd" }} > ` + b.Dir + `/joined
          printf '%s' {{ shq (output "cp/init" "ca") }} > ` + b.Dir + `/ca
          printf '%s' "$CA" > ` + b.Dir + `/ca-env
          printf '%s' "{{ output "cp/init" "token" }}" > ` + b.Dir + `/token
          printf '%s' "$AUTH" > ` + b.Dir + `/auth
          echo "token is {{ output "cp/init" "token" }}" quoted {{ shq (output "cp/init" "token") }}
    health_gate:
      check: 'echo "gate sees {{ output "cp/init" "token" }}"; [ "$(cat ` + b.Dir + `/token)" = {{ shq (output "cp/init" "token") }} ]'
      timeout: 10s
      retries: 2
`
	if _, err := composition.Load("outputs.yaml", []byte(doc)); err != nil {
		s.t.Fatal(err)
	}
	return []byte(doc) // as the CLI sends it
}

// execGantry runs the CLI as an operator of s.
func execGantry(bin string, s *stack, args ...string) (string, error) {
	out, err := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...).CombinedOutput()
	return string(out), err
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// Outputs written on host a reach a command, its env and its health gate
// on host b: a multi-line one as it is, a secret one masked in b's output
// and stored nowhere a viewer reads (events, logs, the state, status),
// only in gantry_outputs, which a viewer cannot read.
func TestOutputsFromOneHostToAnother(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2})
	a, b := s.fleet.Hosts[0], s.fleet.Hosts[1]
	secret := secretValue(t)
	for name, v := range map[string]string{"token": secret, "version": "v1"} {
		if err := os.WriteFile(filepath.Join(a.Dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	r, code := s.submit(outputsDoc(s, "outs", ""))
	if code != "" || r.Status != "accepted" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	doc := s.wait(r.WorkflowID, 90*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s: %s; %+v", doc.Status, doc.Error, doc.Formulas["w"])
	}
	for file, want := range map[string]string{"joined": "joined v1\n", "ca": "line one\nline 'two'", "ca-env": "line one\nline 'two'", "token": secret, "auth": "Bearer " + secret} {
		if got := readFile(t, filepath.Join(b.Dir, file)); got != want {
			t.Errorf("host b's %s holds %q, want %q", file, got, want)
		}
	}
	if fd := doc.Formulas["w"]; fd == nil || fd.Status != dag.FormulaHealthy {
		t.Errorf("formula w: %+v, want healthy (its gate read the token)", fd)
	}

	// The non-secret values in the node's state; the secret one by name.
	init := doc.Formulas["cp"].Nodes["init"]
	if init.Outputs["join_cmd"] != "echo joined v1" || init.Outputs["ca"] != "line one\nline 'two'" || len(init.Outputs) != 2 || !slices.Equal(init.SecretOutputs, []string{"token"}) {
		t.Errorf("init's outputs in the state: %q, secret %q", init.Outputs, init.SecretOutputs)
	}

	// Masked in b's output lines, and the gate's.
	lines := strings.Join(s.logLines(r.WorkflowID), "\n")
	if !strings.Contains(lines, "join stdout token is *** quoted ***") {
		t.Errorf("b's output lines do not show the token masked:\n%s", lines)
	}
	if w := doc.Formulas["w"]; w.Health == nil || !strings.Contains(w.Health.Output, "gate sees ***") {
		t.Errorf("the gate's output: %+v", w.Health)
	}

	// Nowhere but gantry_outputs.
	found, read := s.scanStreams(secret)
	for _, f := range found {
		if !strings.HasPrefix(f, events.KVStream(events.BucketOutputs)+" ") {
			t.Errorf("the secret output is in %s", f)
		}
	}
	if len(found) == 0 {
		t.Errorf("the secret output is not in %s", events.BucketOutputs)
	}
	if strings.Contains(s.readLogs(), secret) {
		t.Error("the secret output is in the services' logs")
	}
	bin := buildGantry(t)
	for _, args := range [][]string{{"status", r.WorkflowID}, {"status", r.WorkflowID, "-o", "json"}, {"watch", r.WorkflowID, "-o", "json"}} {
		out, _ := execGantry(bin, s, args...)
		if strings.Contains(out, secret) {
			t.Errorf("gantry %s shows the secret output", strings.Join(args, " "))
		}
		if args[len(args)-1] == "json" && args[0] == "status" && !strings.Contains(out, `"join_cmd": "echo joined v1"`) {
			t.Errorf("gantry status -o json does not show join_cmd:\n%s", out)
		}
	}
	t.Logf("%d stored messages scanned: the secret output only in %s", read, events.BucketOutputs)

	// A viewer cannot read gantry_outputs.
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	vjs, err := jetstream.New(s.ns.Connect(events.Viewer))
	if err != nil {
		t.Fatal(err)
	}
	if kv, err := vjs.KeyValue(ctx, events.BucketOutputs); err == nil {
		if e, err := kv.Get(ctx, events.OutputKey("outs", "cp", "init")); err == nil {
			t.Fatalf("a viewer read the outputs: %q", e.Value())
		}
	}
	// Raw JetStream API request: this tests the bus's permissions.
	msg, err := s.ns.Connect(events.Viewer).Request("$JS.API.DIRECT.GET."+events.KVStream(events.BucketOutputs)+".$KV."+events.BucketOutputs+".outs.cp.init", nil, 2*time.Second)
	if err == nil && strings.Contains(string(msg.Data), secret) {
		t.Fatal("a viewer read the outputs with a direct get")
	}
}

// A node that reads an output its producer did not write fails, naming
// the producer and the output, and runs nothing.
func TestMissingOutputFailsTheReader(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	c, err := composition.Load("missing.yaml", []byte(`name: missing
hosts: {h: {address: "`+h.Addr+`", user: `+s.fleet.User+`}}
formulas:
  - id: cp
    server: h
    nodes:
      - {name: init, outputs: [a, b], run: 'echo a=1 >> "$GANTRY_OUTPUT"'}
      - {name: use, run: 'echo {{ output "cp/init" "b" }} > `+h.Dir+`/used'}
`))
	if err != nil {
		t.Fatal(err)
	}
	id := s.mustSubmit(c)
	doc := s.wait(id, 60*time.Second)
	use := doc.Formulas["cp"].Nodes["use"]
	if doc.Status != dag.WorkflowFailed || use.Status != dag.NodeFailed || !strings.Contains(use.Error, "output missing: cp/init b: node cp/init did not write b to $GANTRY_OUTPUT") {
		t.Fatalf("workflow %s, use %+v", doc.Status, use)
	}
	if use.Attempts > 1 {
		t.Errorf("a missing output was tried %d times", use.Attempts)
	}
	if fileExists(filepath.Join(h.Dir, "used")) {
		t.Error("the node that reads a missing output ran")
	}
	if init := doc.Formulas["cp"].Nodes["init"]; init.Outputs["a"] != "1" {
		t.Errorf("init's outputs: %q", init.Outputs)
	}
}

// A node that writes an output it does not declare fails, naming the line
// (not what it holds: it may be a value written without its name).
func TestUndeclaredOutputFailsTheWriter(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	c, err := composition.Load("undeclared.yaml", []byte(`name: undeclared
hosts: {h: {address: "`+h.Addr+`", user: `+s.fleet.User+`}}
formulas:
  - id: cp
    server: h
    nodes:
      - {name: init, outputs: [a], run: 'printf "a=1\nb=2\n" >> "$GANTRY_OUTPUT"'}
`))
	if err != nil {
		t.Fatal(err)
	}
	doc := s.wait(s.mustSubmit(c), 60*time.Second)
	init := doc.Formulas["cp"].Nodes["init"]
	if init.Status != dag.NodeFailed || !strings.Contains(init.Error, `an output the node does not declare: line 2 (its name is not quoted: the line may hold a secret; the node declares a)`) {
		t.Fatalf("init: %+v", init)
	}
}

// A retry that finds the producer recorded succeeded, and a later run
// that skips it (already succeeded with the same spec), give the nodes
// that read its outputs what it stored when it ran.
func TestSkippedProducerOutputsStillRead(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2})
	a, b := s.fleet.Hosts[0], s.fleet.Hosts[1]
	for name, v := range map[string]string{"token": secretValue(t), "version": "v1"} {
		if err := os.WriteFile(filepath.Join(a.Dir, name), []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// The first run: join fails until the flag is there.
	flag := filepath.Join(b.Dir, "flag")
	r, code := s.submit(outputsDoc(s, "rerun", "test -f "+flag+" || exit 3"))
	if code != "" {
		t.Fatalf("rejected: %v", r.Errors)
	}
	doc := s.wait(r.WorkflowID, 90*time.Second)
	if doc.Status != dag.WorkflowFailed || doc.Formulas["w"].Nodes["join"].Status != dag.NodeFailed {
		t.Fatalf("first run %s, join %+v", doc.Status, doc.Formulas["w"].Nodes["join"])
	}
	if err := os.WriteFile(flag, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	// The value init would write now: what is read must be what it wrote.
	if err := os.WriteFile(filepath.Join(a.Dir, "version"), []byte("v2\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if body, code := s.control(r.WorkflowID, events.VerbRetry); code != "" {
		t.Fatalf("retry: %s %s", code, body)
	}
	doc = s.waitGen(r.WorkflowID, 2, 90*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("retry: %s: %s", doc.Status, doc.Error)
	}
	if got := readFile(t, filepath.Join(b.Dir, "joined")); got != "joined v1\n" {
		t.Errorf("after the retry, join read %q, want what init wrote in the first generation", got)
	}

	// A later run, join changed: init is skipped, join runs and reads.
	r2, code := s.submit(outputsDoc(s, "rerun", "echo changed"))
	if code != "" {
		t.Fatalf("rejected: %v", r2.Errors)
	}
	doc = s.wait(r2.WorkflowID, 90*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("second run: %s: %s", doc.Status, doc.Error)
	}
	if init := doc.Formulas["cp"].Nodes["init"]; init.Status != dag.NodeSkipped {
		t.Errorf("init in the second run: %s, want skipped", init.Status)
	}
	if join := doc.Formulas["w"].Nodes["join"]; join.Status != dag.NodeSucceeded {
		t.Errorf("join in the second run: %s", join.Status)
	}
	if got := readFile(t, filepath.Join(b.Dir, "joined")); got != "joined v1\n" {
		t.Errorf("with init skipped, join read %q, want what init stored", got)
	}
	if n := strings.Count(readFile(t, filepath.Join(a.Dir, "ran")), "init"); n != 1 {
		t.Errorf("init ran %d times, want 1", n)
	}
}

// Outputs read into a script can make it longer than a host's shell takes
// as one argument (here 3 reads of a 50,000-byte output): the node fails
// at once, naming the size, and nothing runs; before, a gate's check got
// "Argument list too long" from the host and read it as a failed check.
func TestOutputsThatMakeAScriptTooLargeFailItClearly(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 1})
	h := s.fleet.Hosts[0]
	marker := filepath.Join(t.TempDir(), "ran")
	read := `{{ output "cp/init" "v" }}{{ output "cp/init" "v" }}{{ output "cp/init" "v" }}`
	c, err := composition.Load("big.yaml", []byte(`name: big
hosts: {h: {address: "`+h.Addr+`", user: `+s.fleet.User+`}}
formulas:
  - id: cp
    server: h
    nodes:
      - name: init
        outputs: [v]
        run: 'printf "v=%050000d\n" 0 >> "$GANTRY_OUTPUT"'
  - id: w
    server: h
    nodes:
      - name: use
        run: |
          touch `+marker+`
          x='`+read+`'
`))
	if err != nil {
		t.Fatal(err)
	}
	doc := s.wait(s.mustSubmit(c), 60*time.Second)
	use := doc.Formulas["w"].Nodes["use"]
	if use.Status != dag.NodeFailed || !strings.Contains(use.Error, "nothing ran: the run script with its environment (its outputs in) is ") ||
		!strings.Contains(use.Error, "more than the 120 KiB a script may be") {
		t.Fatalf("use: %s %q", use.Status, use.Error)
	}
	if _, err := os.Stat(marker); err == nil {
		t.Error("the script ran")
	}
}
