package e2e

import (
	"errors"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// TestViewerCannotReadAnOperatorsPlan: people share the _INBOX reply
// space that nats tools use by default; a submit's reply is the plan,
// every rendered command in it. The gantry CLI gets an operator's replies
// on the operator's own prefix, which a viewer may not subscribe to: a
// viewer listening on every inbox it may, and trying the operator's,
// never sees a command of the run.
func TestViewerCannotReadAnOperatorsPlan(t *testing.T) {
	bin := buildGantry(t)
	s := newStack(t, stackOptions{})
	var mu sync.Mutex
	var seen []string
	var refused []string
	spy, err := nats.Connect(s.ns.URL(), s.ns.Options(events.Viewer, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) {
			mu.Lock()
			refused = append(refused, err.Error())
			mu.Unlock()
		}
	}))...)
	if err != nil {
		t.Fatal(err)
	}
	defer spy.Close()
	for _, subject := range []string{"_INBOX.>", events.Operator.InboxPrefix() + ".>"} {
		if _, err := spy.Subscribe(subject, func(m *nats.Msg) {
			mu.Lock()
			seen = append(seen, m.Subject+" "+string(m.Data))
			mu.Unlock()
		}); err != nil {
			t.Fatal(err)
		}
	}
	if err := spy.Flush(); err != nil {
		t.Fatal(err)
	}
	const marker = "PLAN-MARKER-7f3a" // the command prints nothing: only the plan holds it
	c := &dag.Composition{Name: "plan", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: ": " + marker}}}}}
	file := writeJSON(t, filepath.Join(t.TempDir(), "plan.json"), c)
	if code, out := s.cli(bin, "submit", file, "--watch"); code != 0 {
		t.Fatalf("submit: exit %d\n%s", code, out)
	}
	// And a request of a viewer's own still gets its reply on _INBOX.
	// Raw, not the gantry client: this tests the bus's reply inboxes.
	if _, err := spy.Request(events.StateList, []byte(`{}`), 10*time.Second); err != nil {
		t.Fatalf("a viewer's own request: %v", err)
	}
	time.Sleep(200 * time.Millisecond)
	mu.Lock()
	defer mu.Unlock()
	for _, m := range seen {
		if strings.Contains(m, marker) {
			t.Errorf("the viewer read a reply with the run's command: %.300s", m)
		}
	}
	if len(seen) == 0 {
		t.Error("the viewer's subscription to _INBOX.> saw nothing, not even its own reply")
	}
	want := `"` + events.Operator.InboxPrefix() + `.>"`
	found := false
	for _, r := range refused {
		found = found || strings.Contains(r, want)
	}
	if !found {
		t.Errorf("the server did not refuse the viewer's subscription to %s; refusals: %q", want, refused)
	}
}

// TestViewerOperatorCommandRefusedAtOnce: a viewer running what only an
// operator may do (reconcile reads drift first, on the operator's inbox
// prefix, which the server refuses) is told so at once, not after the
// timeout.
func TestViewerOperatorCommandRefusedAtOnce(t *testing.T) {
	bin := buildGantry(t)
	s := newStack(t, stackOptions{})
	c := &dag.Composition{Name: "rec", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "true"}}}}}
	file := writeJSON(t, filepath.Join(t.TempDir(), "rec.json"), c)
	for _, args := range [][]string{{"reconcile", file}, {"drift", file}, {"state", "--rebuild", "--check"}, {"cancel", "01a20000-0000-7000-8000-000000000000"}} {
		start := time.Now()
		cmd := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Viewer), "--timeout", "20s")...)
		out, err := cmd.CombinedOutput()
		took := time.Since(start)
		if err == nil {
			t.Errorf("gantry %s as a viewer passed:\n%s", strings.Join(args, " "), out)
		}
		if !strings.Contains(string(out), "not allowed for this identity") || took > 10*time.Second {
			t.Errorf("gantry %s as a viewer: after %v:\n%s", strings.Join(args, " "), took.Round(time.Millisecond), out)
		}
	}
}
