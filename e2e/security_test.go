package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// TestTLS: with the server requiring TLS and client certificates, every
// service connects over TLS with the CA the test made, a run completes,
// and clients without TLS or without a certificate are turned away.
func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	s := newStack(t, stackOptions{tls: pki})
	marker := filepath.Join(t.TempDir(), "ran")
	c := &dag.Composition{Name: "over-tls", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "touch " + marker}}}}}
	id := s.mustSubmit(c)
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Fatalf("over TLS: %s", d.Status)
	}
	if _, err := os.Stat(marker); err != nil {
		t.Fatalf("the node did not run: %v", err)
	}
	seed := nats.NkeyOptionFromSeed
	opt, _ := seed(s.ns.Keys.SeedFile(events.Operator))
	if nc, err := nats.Connect(s.ns.URL(), opt, nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client without TLS was let in")
	}
	if nc, err := nats.Connect(s.ns.URL(), opt, nats.RootCAs(pki.ca), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client without a certificate was let in")
	}
}

// natsCLI builds the real nats CLI (tools/go.mod pins it) once.
var natsCLI = sync.OnceValues(func() (string, error) {
	out := filepath.Join(os.TempDir(), fmt.Sprintf("gantry-e2e-nats-%d", os.Getuid()))
	cmd := exec.Command("go", "build", "-o", out, "github.com/nats-io/natscli/nats")
	cmd.Dir = "../tools"
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("build the nats CLI: %v\n%s", err, b)
	}
	return out, nil
})

// forged is a CloudEvent as the attacker would send it: well formed, with
// the right spec hash.
func forged(t *testing.T, p events.Payload) string {
	t.Helper()
	env, err := events.NewAt("6f1e2d3c-0000-4000-8000-0000000000ff", "executor/forged-1", time.Now(), p)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	return string(b)
}

// TestAttacksRefused replays, with the real nats CLI, each attack that
// worked when the bus was open: with no credentials, and as a viewer and
// an operator. The server refuses each, and nothing runs or changes.
func TestAttacksRefused(t *testing.T) {
	nats, err := natsCLI()
	if err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	marker := filepath.Join(dir, "pwned")
	evil := fmt.Sprintf(`{"name":"evil","hosts":{"me":{"transport":"local"}},"formulas":[{"id":"a","server":"me","nodes":[{"name":"n","run":"touch %s; echo $GANTRY_SSH_KEY"}]}]}`, marker)

	// A run whose node a forged success would make skip.
	slow := filepath.Join(dir, "slow-ran")
	c := &dag.Composition{Name: "real", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "touch " + slow}}}}}
	ref := events.Ref{WorkflowID: "01a20000-0000-7000-8000-000000000000", Workflow: "real", Formula: "a", Host: "me", Node: "n", Operation: dag.OpCreate, Generation: 1}
	nodeOK := forged(t, &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded, SpecHash: "sha256:whatever"})
	fref := ref
	fref.Node = ""
	formulaOK := forged(t, &events.FormulaEvent{Ref: fref, Status: dag.FormulaSucceeded})

	before := s.streamState(t)
	workflowsBefore := s.workflowCount(t)
	attacks := []struct {
		name string
		args []string
	}{
		{"submit a local command", []string{"req", events.SubjectSubmit, evil}},
		{"forge node succeeded", []string{"pub", events.HostLifecycle("me"), nodeOK}},
		{"forge formula succeeded", []string{"pub", events.HostLifecycle("me"), formulaOK}},
		{"forge a workflow event", []string{"pub", events.WorkflowLifecycle(ref.WorkflowID), formulaOK}},
		{"dispatch work", []string{"pub", events.HostDispatch("me", ""), "{}"}},
		{"remove the dispatch stream", []string{"stream", "rm", events.StreamDispatch, "-f"}},
		{"purge the event stream", []string{"stream", "purge", events.StreamEvents, "-f"}},
		{"purge the log stream", []string{"stream", "purge", events.StreamLogs, "-f"}},
		{"remove the planner's consumer", []string{"consumer", "rm", events.StreamEvents, events.ConsumerPlanner, "-f"}},
		{"write a node record", []string{"kv", "put", events.BucketNodes, "x", "{}"}},
	}
	for _, who := range []string{"anonymous", "viewer", "operator"} {
		for _, a := range attacks {
			if who == "operator" && a.name == "submit a local command" {
				continue // an operator may submit; that is the point of the identity
			}
			args := append([]string{"--server", s.ns.URL(), "--timeout", "1s"}, a.args...)
			if who != "anonymous" {
				args = append([]string{"--nkey", s.ns.Keys.SeedFile(events.Identity(who))}, args...)
			}
			out, err := exec.Command(nats, args...).CombinedOutput()
			t.Logf("%s: nats %s\n%s", who, strings.Join(a.args[:min(2, len(a.args))], " "), strings.TrimSpace(string(out)))
			if err == nil && !strings.Contains(strings.ToLower(string(out)), "permission") {
				t.Errorf("%s: %s: the nats CLI reported no refusal:\n%s", who, a.name, out)
			}
		}
	}
	time.Sleep(500 * time.Millisecond)
	if _, err := os.Stat(marker); err == nil {
		t.Error("the submitted command ran")
	}
	if after := s.streamState(t); after != before {
		t.Errorf("streams changed:\nbefore %s\nafter  %s", before, after)
	}
	if n := s.workflowCount(t); n != workflowsBefore {
		t.Errorf("workflows: %d, were %d", n, workflowsBefore)
	}
	// The node the forged event named still runs when submitted.
	id := s.mustSubmit(c)
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded || d.Formulas["a"].Nodes["n"].Status != dag.NodeSucceeded {
		t.Fatalf("after the attacks: %s", d.Status)
	}
	if _, err := os.Stat(slow); err != nil {
		t.Errorf("the node did not run: %v", err)
	}
	// A viewer still watches: nats sub with no credentials sees the events.
	// The submit waits for the CLI to say it subscribed (a fixed pause
	// was too short on a loaded machine).
	sub := exec.Command(nats, "--server", s.ns.URL(), "sub", events.AllHostLifecycle, "--count", "1")
	pr, pw := io.Pipe()
	sub.Stdout, sub.Stderr = pw, pw
	if err := sub.Start(); err != nil {
		t.Fatal(err)
	}
	outc := make(chan []byte, 1)
	subscribed := make(chan struct{})
	go func() {
		var all bytes.Buffer
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			all.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "Subscribing on") {
				close(subscribed)
			}
		}
		outc <- all.Bytes()
	}()
	go func() { _ = sub.Wait(); pw.Close() }()
	select {
	case <-subscribed:
	case <-time.After(10 * time.Second):
		_ = sub.Process.Kill()
		t.Fatal("nats sub did not say it subscribed within 10s")
	}
	id = s.mustSubmit(c)
	s.wait(id, 30*time.Second)
	select {
	case b := <-outc:
		if !strings.Contains(string(b), "gantry.") {
			t.Errorf("anonymous nats sub saw no event:\n%s", b)
		}
	case <-time.After(10 * time.Second):
		_ = sub.Process.Kill()
		t.Error("anonymous nats sub received nothing")
	}
}

// streamState summarises every stream's message count and sequences and
// its consumers, as an administrator sees them.
func (s *stack) streamState(t *testing.T) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var b strings.Builder
	for _, name := range []string{events.StreamEvents, events.StreamDispatch, events.StreamGates, events.StreamLogs, "KV_" + events.BucketNodes} {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			fmt.Fprintf(&b, "%s: %v; ", name, err)
			continue
		}
		i := st.CachedInfo()
		fmt.Fprintf(&b, "%s: %d msgs %d-%d consumers %d; ", name, i.State.Msgs, i.State.FirstSeq, i.State.LastSeq, i.State.Consumers)
	}
	if _, err := s.js.Consumer(ctx, events.StreamEvents, events.ConsumerPlanner); err != nil {
		fmt.Fprintf(&b, "planner consumer: %v", err)
	}
	return b.String()
}

func (s *stack) workflowCount(t *testing.T) int {
	t.Helper()
	kv, err := s.js.KeyValue(context.Background(), events.BucketWorkflows)
	if err != nil {
		t.Fatal(err)
	}
	l, err := kv.ListKeysFiltered(context.Background(), "*") // workflow ids, not the composition lists
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for range l.Keys() {
		n++
	}
	return n
}

// TestAuditRecordsWhoAsked: a submit and each control request record who
// made them as the server authenticated them; a header the client fills
// in to claim another identity is replaced by the server's.
func TestAuditRecordsWhoAsked(t *testing.T) {
	s := newStack(t, stackOptions{})
	dir := t.TempDir()
	c := &dag.Composition{Name: "audited", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{
			{ID: "first", Server: "me", Nodes: []dag.Node{{Name: "a", Run: "sleep 1; touch " + dir + "/a"}}},
			{ID: "second", Server: "me", DependsOn: []dag.FormulaDep{{Formula: "first"}}, Nodes: []dag.Node{{Name: "b", Run: "touch " + dir + "/b"}}},
		}}
	m := nats.NewMsg(events.SubjectSubmit)
	m.Data = mustMarshal(t, c)
	m.Header.Set(events.RequestInfoHeader, `{"acc":"GANTRY","user":"UFORGEDFORGEDFORGED","name_tag":"admin"}`)
	// Raw, not the gantry client: a forged header sent on purpose.
	reply, err := s.nc.RequestMsg(m, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var r events.SubmitReply
	if err := decodeReply(reply, &r); err != nil || r.Status != "accepted" {
		t.Fatalf("submit: %s", reply.Data)
	}
	if _, code := s.control(r.WorkflowID, events.VerbPause); code != "" {
		t.Fatalf("pause: %s", code)
	}
	if _, code := s.control(r.WorkflowID, events.VerbResume); code != "" {
		t.Fatalf("resume: %s", code)
	}
	d := s.wait(r.WorkflowID, 30*time.Second)
	operator, _ := s.ns.Keys.Public(events.Operator)
	want := events.Principal{Account: events.AccountClients, User: operator, Name: "operator", Attested: true}
	if d.SubmittedBy == nil || *d.SubmittedBy != want {
		t.Fatalf("submitted by %+v, want %+v", d.SubmittedBy, want)
	}
	if len(d.Requests) != 2 || d.Requests[0].Status != dag.WorkflowPaused || d.Requests[1].Status != dag.WorkflowRunning ||
		d.Requests[0].By != want || d.Requests[1].By != want {
		t.Fatalf("requests: %+v", d.Requests)
	}
	// The events carry it: accepted, paused and the resume's running,
	// each its own event.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cons, err := s.js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{FilterSubjects: []string{events.WorkflowLifecycle(r.WorkflowID)}})
	if err != nil {
		t.Fatal(err)
	}
	batch, err := cons.FetchNoWait(100)
	if err != nil {
		t.Fatal(err)
	}
	var seen []string
	for msg := range batch.Messages() {
		var w events.WorkflowEvent
		env, err := events.Parse(msg.Data())
		if err != nil || events.DecodeData(env, &w) != nil {
			t.Fatalf("bad event %s", msg.Data())
		}
		who := ""
		if w.RequestedBy != nil {
			who = " by " + w.RequestedBy.Name
		}
		seen = append(seen, string(w.Status)+who)
	}
	if got := strings.Join(seen, ", "); got != "accepted by operator, running, paused by operator, running by operator, succeeded" {
		t.Errorf("workflow events: %s", got)
	}
}

func mustMarshal(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestOperatorMode: the same stack with user JWTs signed by an operator
// (as nsc makes them): the CLI submits with a creds file, the audit names
// the user from its JWT, and a client without credentials is turned away.
func TestOperatorMode(t *testing.T) {
	s := newStack(t, stackOptions{operatorMode: true})
	bin := buildGantry(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "ok.yaml")
	os.WriteFile(file, []byte("name: ok\nhosts: {me: {transport: local}}\nformulas:\n  - id: a\n    server: me\n    nodes: [{name: n, run: echo fine}]\n"), 0o644)
	out, err := exec.Command(bin, "submit", "-q", file, "--server", s.ns.URL(), "--creds", s.ns.Keys.CredsFile(events.Operator)).CombinedOutput()
	if err != nil {
		t.Fatalf("submit with --creds: %v\n%s", err, out)
	}
	id := strings.TrimSpace(string(out))
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded || d.SubmittedBy == nil || d.SubmittedBy.Name != "operator" {
		t.Fatalf("%s, submitted by %+v", d.Status, d.SubmittedBy)
	}
	out, _ = exec.Command(bin, "status", id, "--server", s.ns.URL(), "--creds", s.ns.Keys.CredsFile(events.Viewer)).CombinedOutput()
	if !strings.Contains(string(out), "submitted by operator\n") { // by name; -o json keeps the key
		t.Errorf("status as a viewer:\n%s", out)
	}
	out, _ = exec.Command(bin, "status", id, "-o", "json", "--server", s.ns.URL(), "--creds", s.ns.Keys.CredsFile(events.Viewer)).CombinedOutput()
	if pub, _ := s.ns.Keys.Public(events.Operator); !strings.Contains(string(out), `"user": "`+pub+`"`) {
		t.Errorf("status -o json does not keep the submitter's key %s:\n%s", pub, out)
	}
	if nc, err := nats.Connect(s.ns.URL(), nats.Timeout(2*time.Second)); err == nil {
		nc.Close()
		t.Error("a client without credentials was let in")
	}
}
