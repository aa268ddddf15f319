package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// secretValue is a random secret: a value that can only turn up where it
// leaked.
func secretValue(t *testing.T) string {
	b := make([]byte, 12)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return "pw-" + hex.EncodeToString(b)
}

// scanStreams reads every message of every stream (event, dispatch, gate
// and log streams, and the streams under every KV bucket, history
// included) and returns where needle occurs, and how many messages were
// read.
func (s *stack) scanStreams(needle string) (found []string, read int) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	names := s.js.StreamNames(ctx)
	for name := range names.Name() {
		st, err := s.js.Stream(ctx, name)
		if err != nil {
			s.t.Fatal(err)
		}
		info, err := st.Info(ctx)
		if err != nil {
			s.t.Fatal(err)
		}
		for seq := info.State.FirstSeq; seq <= info.State.LastSeq && info.State.Msgs > 0; seq++ {
			m, err := st.GetMsg(ctx, seq)
			if errors.Is(err, jetstream.ErrMsgNotFound) {
				continue
			}
			if err != nil {
				s.t.Fatalf("stream %s seq %d: %v", name, seq, err)
			}
			read++
			hdr := fmt.Sprint(m.Header)
			if bytes.Contains(m.Data, []byte(needle)) || strings.Contains(hdr, needle) || strings.Contains(m.Subject, needle) {
				found = append(found, fmt.Sprintf("%s seq %d (%s)", name, seq, m.Subject))
			}
		}
	}
	if err := names.Err(); err != nil {
		s.t.Fatal(err)
	}
	return found, read
}

// A secret a node and a gate use reaches their commands, and nothing
// else: not a stream, not a bucket, not a service log, not the CLI. Where
// the commands printed it, *** stands.
func TestSecretsNeverLeaveTheWorker(t *testing.T) {
	secret := secretValue(t)
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "db_pass"), []byte(secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, stackOptions{hosts: 1, secretsDir: dir})
	h := s.fleet.Hosts[0]
	got := filepath.Join(h.Dir, "received")
	env := map[string]dag.EnvValue{"DB_PASS": dag.SecretRef("db_pass"), "PLAIN": dag.Text("visible")}
	c := &dag.Composition{Name: "secrets", Hosts: map[string]dag.Host{"h1": {Transport: dag.TransportSSH, Address: h.Addr, User: s.fleet.User}},
		Formulas: []dag.Formula{{ID: "db", Server: "h1", Nodes: []dag.Node{{Name: "use", Env: env,
			// the whole value, then split over two writes with a pause
			// between them, then on stderr
			Run: `printf '%s' "$DB_PASS" >` + got + `; echo "password is $DB_PASS ($PLAIN)"; ` +
				`printf '%s' "${DB_PASS%????????}"; sleep 0.3; printf '%s\n' "${DB_PASS#"${DB_PASS%????????}"}"; echo "stderr $DB_PASS" >&2`}},
			HealthGate: &dag.HealthGate{Check: `echo "gate sees $TOKEN"; [ -n "$TOKEN" ]`, Timeout: dag.Duration(10 * time.Second), Retries: 2,
				Env: map[string]dag.EnvValue{"TOKEN": dag.SecretRef("db_pass")}}},
			{ID: "fails", Server: "h1", Nodes: []dag.Node{{Name: "leaky", Env: env, Run: `echo "failing with $DB_PASS" >&2; exit 3`,
				Retry: &dag.RetryPolicy{MaxAttempts: 1}}}}},
	}
	// Everything said on the bus while the run goes on: work messages that
	// are gone once done (dispatch, gate), KV writes, requests and replies.
	var wire struct {
		sync.Mutex
		msgs  int
		found []string
	}
	sub, err := s.ns.Connect(busauth.Admin).Subscribe(">", func(m *nats.Msg) {
		wire.Lock()
		defer wire.Unlock()
		wire.msgs++
		if bytes.Contains(m.Data, []byte(secret)) || strings.Contains(fmt.Sprint(m.Header), secret) {
			wire.found = append(wire.found, m.Subject)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	id := s.mustSubmit(c)
	doc := s.wait(id, 60*time.Second)
	if doc.Status != dag.WorkflowFailed {
		t.Fatalf("workflow %s, want failed (formula fails fails)", doc.Status)
	}
	if b, err := os.ReadFile(got); err != nil || string(b) != secret {
		t.Fatalf("the command received %q (%v), want the secret", b, err)
	}

	// Where it was printed, *** stands.
	lines := map[string]bool{}
	for _, e := range s.logLines(id) {
		lines[e] = true
	}
	for _, want := range []string{"use stdout password is *** (visible)", "use stdout ***", "use stderr stderr ***", "leaky stderr failing with ***"} {
		if !lines[want] {
			t.Errorf("no output line %q among %v", want, lines)
		}
	}

	// The CLI, every way it shows a run.
	bin := buildGantry(t)
	cli := func(args ...string) string {
		out, _ := exec.Command(bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...).CombinedOutput()
		return string(out)
	}
	outputs := map[string]string{
		"status":         cli("status", id),
		"status -o json": cli("status", id, "-o", "json"),
		"watch":          cli("watch", id),
		"watch -o json":  cli("watch", id, "-o", "json"),
		"state":          cli("state"),
		"state -o json":  cli("state", "-o", "json"),
		"list -o json":   cli("list", "-o", "json"),
	}
	for what, out := range outputs {
		if strings.Contains(out, secret) {
			t.Errorf("gantry %s shows the secret:\n%s", what, out)
		}
	}
	if !strings.Contains(outputs["watch"], "stderr: failing with ***") || !strings.Contains(outputs["status -o json"], `"output": "gate sees ***\n"`) {
		t.Errorf("the failed node's stderr tail or the gate's output is not shown masked:\nwatch:\n%s\nstatus:\n%s", outputs["watch"], outputs["status -o json"])
	}

	// Every stream and bucket, and the services' logs.
	time.Sleep(200 * time.Millisecond) // the last replies reach the subscription
	_ = sub.Unsubscribe()
	wire.Lock()
	if len(wire.found) > 0 {
		t.Errorf("the secret went over the bus on %q", wire.found)
	}
	if wire.msgs < 20 {
		t.Errorf("only %d messages seen on the bus", wire.msgs)
	}
	wireMsgs := wire.msgs
	wire.Unlock()
	found, read := s.scanStreams(secret)
	if len(found) > 0 {
		t.Errorf("the secret is in %d messages: %q", len(found), found)
	}
	masked, _ := s.scanStreams("***")
	if len(masked) == 0 {
		t.Errorf("*** is in no message")
	}
	if strings.Contains(s.readLogs(), secret) {
		t.Errorf("the secret is in the service logs")
	}
	t.Logf("scanned %d messages on the bus (subject >), %d in every stream and bucket, %d bytes of service logs and %d CLI outputs: the secret in none; *** in %d stored messages",
		wireMsgs, read, len(s.readLogs()), len(outputs), len(masked))
}

// logLines is every output line of a workflow: "node stream line".
func (s *stack) logLines(id string) []string {
	s.t.Helper()
	var out []string
	s.workflowEnvelopes(events.StreamLogs, id, func(env *events.Envelope) {
		var l events.LogLine
		if events.DecodeData(env, &l) == nil {
			out = append(out, l.Node+" "+string(l.Stream)+" "+l.Line)
		}
	})
	return out
}
