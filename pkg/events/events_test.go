package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2/event"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

var update = flag.Bool("update", false, "rewrite the golden files")

var (
	t0   = time.Date(2026, 11, 21, 12, 0, 0, 0, time.UTC)
	t1   = t0.Add(1500 * time.Millisecond)
	zero = 0
	one  = 1
	ref  = events.Ref{WorkflowID: "0b5c3a52-4f0c-4c51-9d0e-7a4d2f9e8a11", Workflow: "wuji", Formula: "cp-containerd", Host: "cp-0", Node: "containerd", Operation: dag.OpCreate, Generation: 1}
)

func wfRef() events.Ref  { r := ref; r.Formula, r.Host, r.Node = "", "", ""; return r }
func fmlRef() events.Ref { r := ref; r.Node = ""; return r }

// samples holds one event of every payload struct, with every field set.
func samples() map[string]events.Payload {
	return map[string]events.Payload{
		"workflow_running": &events.WorkflowEvent{Ref: wfRef(), Status: dag.WorkflowRunning,
			Run:      events.Run{Attempt: 1, StartedAt: &t0},
			Formulas: map[events.FormulaState]int{dag.FormulaPending: 7, dag.FormulaRunning: 3}},
		"workflow_stopping": &events.WorkflowEvent{Ref: wfRef(), Status: dag.WorkflowRunning, Run: events.Run{Attempt: 1, StartedAt: &t1},
			Formulas: map[events.FormulaState]int{dag.FormulaSucceeded: 2, dag.FormulaRunning: 1, dag.FormulaPending: 1},
			Reason:   "deadline: formula cp-containerd's timeout of 15m0s passed: stopping it", Stopping: []string{"cp-containerd"}},
		"workflow_accepted": &events.WorkflowEvent{Ref: wfRef(), Status: dag.WorkflowAccepted,
			Run: events.Run{Attempt: 1, StartedAt: &t0}, Formulas: map[events.FormulaState]int{dag.FormulaPending: 10}, TotalNodes: 22,
			RequestedBy: &events.Principal{Account: events.AccountClients, User: "UDZVM76T75GCTSNFSN4ZHGV7DX25HWTR2GMGKOX54JVTWJDM4GFMLFXJ", Name: "alice", Attested: true},
			Graph: &events.Graph{Formulas: []events.GraphFormula{
				{ID: "os-base", Host: "cp-0", Nodes: []events.GraphNode{{Name: "apt"}, {Name: "containerd", DependsOn: []string{"apt"}}}},
				{ID: "app-web-1", Host: "web-1", Of: "app", Batch: 1, Batches: 2, Gate: true,
					DependsOn: []dag.FormulaDep{{Formula: "os-base", Condition: dag.ConditionHealthy}}, Nodes: []events.GraphNode{{Name: "conf"}}},
			}}},
		"workflow_failed": &events.WorkflowEvent{Ref: wfRef(), Status: dag.WorkflowFailed,
			Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t1, Error: "formula cp-containerd failed"}, Reason: "on_failure stop"},
		"formula_blocked": &events.FormulaEvent{Ref: func() events.Ref { r := fmlRef(); r.Formula = "worker-0-kubernetes"; r.Host = "worker-0"; return r }(),
			Status: dag.FormulaBlocked, Run: events.Run{EndedAt: &t1}, Blocker: "cp-kubernetes"},
		"formula_healthy": &events.FormulaEvent{Ref: fmlRef(), Status: dag.FormulaHealthy, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t1}},
		"node_running":    &events.NodeEvent{Ref: ref, Status: dag.NodeRunning, Run: events.Run{Attempt: 1, StartedAt: &t0}, MaxAttempts: 3, SpecHash: "sha256:ab", Actor: "executor/host-a-1"},
		"node_succeeded": &events.NodeEvent{Ref: ref, Status: dag.NodeSucceeded, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t1, ExitCode: &zero},
			MaxAttempts: 3, SpecHash: "sha256:ab", Actor: "executor/host-a-1", StdoutTail: "Setting up containerd (1.6.20~ds1-1) ...\n",
			Outputs: map[string]string{"join_cmd": "kubeadm join 10.0.0.10:6443"}, SecretOutputs: []string{"token"}},
		"node_failed": &events.NodeEvent{Ref: ref, Status: dag.NodeFailed, Run: events.Run{Attempt: 3, StartedAt: &t0, EndedAt: &t1, ExitCode: &one, Error: "exit status 1"},
			MaxAttempts: 3, SpecHash: "sha256:ab", Actor: "executor/host-a-1", StderrTail: "E: Unable to locate package containerd\n"},
		"node_skipped": &events.NodeEvent{Ref: ref, Status: dag.NodeSkipped, Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t1, ExitCode: &zero}, SpecHash: "sha256:ab", Reason: "check passed"},
		"node_checked": &events.NodeEvent{Ref: func() events.Ref { r := ref; r.Operation = dag.OpCheck; return r }(), Status: dag.NodeSucceeded,
			Run: events.Run{Attempt: 1, StartedAt: &t0, EndedAt: &t1, ExitCode: &one}, Check: events.CheckWouldChange},
		"health_attempt": &events.HealthEvent{Ref: fmlRef(), Status: events.HealthFail, Run: events.Run{Attempt: 2, StartedAt: &t0, EndedAt: &t1, ExitCode: &one}, Retries: 6, OutputTail: "inactive\n"},
		"health_passed":  &events.HealthEvent{Ref: fmlRef(), Status: events.HealthPass, Run: events.Run{Attempt: 3, StartedAt: &t0, EndedAt: &t1, ExitCode: &zero}, Final: true, Retries: 6, OutputTail: "active\n"},
		"health_failed":  &events.HealthEvent{Ref: fmlRef(), Status: events.HealthFail, Run: events.Run{Attempt: 6, StartedAt: &t0, EndedAt: &t1, ExitCode: &one, Error: "gate budget of 1m0s used up"}, Final: true, Retries: 6},
		"rollout_batch_finished": &events.RolloutEvent{Ref: events.Ref{WorkflowID: ref.WorkflowID, Workflow: ref.Workflow, Formula: "app", Operation: dag.OpCreate, Generation: 1},
			Status: events.RolloutBatchFinished, Batch: 1, Batches: 3, Instances: []string{"app-web-1"}, Failed: 0, MaxFailed: 0, At: &t1},
		"rollout_stopped": &events.RolloutEvent{Ref: events.Ref{WorkflowID: ref.WorkflowID, Workflow: ref.Workflow, Formula: "app", Operation: dag.OpCreate, Generation: 1},
			Status: events.RolloutStopped, Batch: 2, Batches: 3, Instances: []string{"app-web-2"}, Failed: 1, MaxFailed: 0,
			Reason: "rollout of app stopped after batch 2 of 3: 1 instance failed (app-web-2), max_failed 0", At: &t1},
		"progress_update": &events.ProgressEvent{Ref: ref, Attempt: 2, Percent: 42},
		"log_line":        &events.LogLine{Ref: ref, Attempt: 1, Stream: events.Stdout, Seq: 42, Line: "Unpacking containerd ..."},
		"dispatch": &events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportSSH, Address: "10.0.0.10:22", User: "root"},
			MaxParallel: 1, OnFailure: dag.OnFailureStop, Order: []string{"containerd", "containerd-config"}, Priority: 90, SkipAtTurnAfter: ptr(uint64(4711)), Timeout: dag.Duration(15 * time.Minute),
			Limits: []dag.SlotLimit{{ID: "h-3f2a9c0d1e4b5a67", Name: "host cp-0", MaxParallel: 4}, {ID: "l-9a8b7c6d5e4f3a21", Name: "provider=hetzner", MaxParallel: 10}},
			Nodes: []events.WorkNode{
				{Name: "containerd", Command: "apt-get install -y containerd", Check: "command -v containerd", Timeout: dag.Duration(10 * time.Minute),
					Env: map[string]dag.EnvValue{"DEBIAN_FRONTEND": dag.Text("noninteractive"), "APT_TOKEN": dag.SecretRef("apt_token")}, Retry: dag.DefaultRetry, SpecHash: "sha256:ab"},
				{Name: "containerd-config", Command: "systemctl restart containerd", DependsOn: []string{"containerd"}, Timeout: dag.Duration(30 * time.Minute),
					Retry: dag.DefaultRetry, SpecHash: "sha256:cd", AlreadyDone: true},
			}},
		"gate_request": &events.GateRequest{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportSSH, Address: "10.0.0.10:22", User: "root",
			Via: []events.Jump{{Address: "203.0.113.5:22", User: "ops"}, {Address: "10.0.1.1:2222"}}},
			Gate: dag.HealthGate{Check: "systemctl is-active containerd", Timeout: dag.Duration(time.Minute), Retries: 6,
				Env: map[string]dag.EnvValue{"UNIT": dag.Text("containerd"), "TOKEN": dag.SecretRef("probe_token")}}},
	}
}

func encode(t *testing.T, p events.Payload) []byte {
	t.Helper()
	env, err := events.NewAt("6f1e2d3c-0000-4000-8000-000000000001", "executor/host-a-1", t0, p)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(env, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

func TestGolden(t *testing.T) {
	for name, p := range samples() {
		t.Run(name, func(t *testing.T) {
			golden(t, name, encode(t, p))
		})
	}
}

// The data of every event carries at least the fields DESIGN.md promises.
func TestDataCarriesContractFields(t *testing.T) {
	required := []string{"workflow_id", "workflow", "formula", "host", "node", "operation", "status", "attempt", "started_at", "ended_at", "exit_code", "error"}
	for name, p := range samples() {
		switch p.(type) {
		case *events.LogLine, *events.Dispatch, *events.GateRequest, *events.RolloutEvent, *events.ProgressEvent:
			continue // output and work messages, not state events
		}
		var data map[string]any
		if err := json.Unmarshal(encodeData(t, p), &data); err != nil {
			t.Fatal(err)
		}
		for _, f := range required {
			if _, ok := data[f]; !ok {
				t.Errorf("%s: data has no %q", name, f)
			}
		}
	}
}

func encodeData(t *testing.T, p events.Payload) []byte {
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Our events are valid CloudEvents for the official Go SDK, and their data
// decodes back to the same payload.
func TestCloudEventsSDKAcceptsOurEvents(t *testing.T) {
	for name, p := range samples() {
		t.Run(name, func(t *testing.T) {
			raw := encode(t, p)
			var ce cloudevents.Event
			if err := json.Unmarshal(raw, &ce); err != nil {
				t.Fatalf("SDK cannot decode: %v", err)
			}
			if err := ce.Validate(); err != nil {
				t.Fatalf("SDK says invalid: %v", err)
			}
			if ce.SpecVersion() != "1.0" || ce.Type() != string(p.EventType()) || ce.Source() != "executor/host-a-1" ||
				ce.DataContentType() != "application/json" || ce.DataSchema() != p.EventType().Schema() || !ce.Time().Equal(t0) {
				t.Errorf("attributes: %s", ce.String())
			}
			if !strings.HasPrefix(ce.Type(), "gantry.") {
				t.Errorf("type %q", ce.Type())
			}
			// the data round-trips through the SDK to the same payload
			again := newLike(p)
			if err := ce.DataAs(again); err != nil {
				t.Fatalf("DataAs: %v", err)
			}
			if a, b := encodeData(t, p), encodeData(t, again); !bytes.Equal(a, b) {
				t.Errorf("data changed through the SDK:\n%s\n%s", a, b)
			}
			// and our own parser accepts it
			env, err := events.Parse(raw)
			if err != nil {
				t.Fatal(err)
			}
			if err := events.DecodeData(env, newLike(p)); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func newLike(p events.Payload) events.Payload {
	switch p.(type) {
	case *events.WorkflowEvent:
		return &events.WorkflowEvent{}
	case *events.FormulaEvent:
		return &events.FormulaEvent{}
	case *events.NodeEvent:
		return &events.NodeEvent{}
	case *events.HealthEvent:
		return &events.HealthEvent{}
	case *events.LogLine:
		return &events.LogLine{}
	case *events.Dispatch:
		return &events.Dispatch{}
	case *events.GateRequest:
		return &events.GateRequest{}
	case *events.RolloutEvent:
		return &events.RolloutEvent{}
	case *events.ProgressEvent:
		return &events.ProgressEvent{}
	}
	panic("unknown payload")
}

func TestParseRejectsBadEvents(t *testing.T) {
	good := string(encode(t, samples()["node_failed"]))
	cases := map[string]struct {
		doc  string
		want error
		msg  string
	}{
		"not json":          {`{"specversion":`, events.ErrMalformed, "unexpected end"},
		"wrong specversion": {strings.Replace(good, `"1.0"`, `"0.3"`, 1), events.ErrMalformed, `specversion "0.3"`},
		"missing id":        {strings.Replace(good, `"id": "6f1e2d3c-0000-4000-8000-000000000001"`, `"id": ""`, 1), events.ErrMalformed, "missing id"},
		"unknown type":      {strings.Replace(good, `"gantry.node.failed"`, `"gantry.node.exploded"`, 1), events.ErrUnknownType, "gantry.node.exploded"},
		"foreign type":      {strings.Replace(good, `"gantry.node.failed"`, `"com.example.thing"`, 1), events.ErrUnknownType, "com.example.thing"},
		"wrong content":     {strings.Replace(good, `"application/json"`, `"text/xml"`, 1), events.ErrMalformed, "datacontenttype"},
		"no data":           {good[:strings.Index(good, `"data"`)] + `"data": null}`, events.ErrMalformed, "has no data"},
		"too large":         {`{"x":"` + strings.Repeat("a", events.MaxEventBytes) + `"}`, events.ErrMalformed, "over the"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := events.Parse([]byte(tc.doc))
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want %v containing %q", err, tc.want, tc.msg)
			}
		})
	}
}

func TestDecodeDataRejectsBadPayloads(t *testing.T) {
	cases := map[string]struct {
		p   events.Payload
		msg string
	}{
		"node without node":     {&events.NodeEvent{Ref: fmlRef(), Status: dag.NodeRunning}, "node: missing"},
		"bad host name":         {&events.NodeEvent{Ref: func() events.Ref { r := ref; r.Host = "a..b"; return r }(), Status: dag.NodeRunning}, `host "a..b" is not a host name`},
		"bad operation":         {&events.FormulaEvent{Ref: func() events.Ref { r := fmlRef(); r.Operation = "zap"; return r }(), Status: dag.FormulaRunning}, "operation"},
		"dispatch no nodes":     {&events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 1}, "nodes: missing"},
		"dispatch bad dep":      {&events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 1, Nodes: []events.WorkNode{{Name: "a", DependsOn: []string{"zz"}}}, Order: []string{"a"}}, `unknown node "zz"`},
		"via without address":   {&events.GateRequest{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportSSH, Address: "10.0.0.1:22", Via: []events.Jump{{User: "ops"}}}, Gate: dag.HealthGate{Check: "true", Timeout: 1, Retries: 1}}, "host_spec.via[0].address"},
		"local with via":        {&events.GateRequest{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal, Via: []events.Jump{{Address: "10.0.0.1:22"}}}, Gate: dag.HealthGate{Check: "true", Timeout: 1, Retries: 1}}, "host_spec.via"},
		"dispatch bad limit":    {&events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 1, Nodes: []events.WorkNode{{Name: "a"}}, Order: []string{"a"}, Limits: []dag.SlotLimit{{ID: "a.b"}}}, `limits[0].id`},
		"dispatch order twice":  {&events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 4, Nodes: []events.WorkNode{{Name: "a"}, {Name: "b"}}, Order: []string{"a", "a"}}, `order: node "a" named twice`},
		"dispatch two named a":  {&events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 1, Nodes: []events.WorkNode{{Name: "a", Command: "first"}, {Name: "a", Command: "second"}}, Order: []string{"a", "a"}}, `nodes[1].name "a": a second node of that name`},
		"dispatch ssh no addr":  {&events.Dispatch{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportSSH}, MaxParallel: 1, Nodes: []events.WorkNode{{Name: "a"}}, Order: []string{"a"}}, "host_spec.address"},
		"gate without check":    {&events.GateRequest{Ref: fmlRef(), Host: events.HostSpec{Transport: dag.TransportLocal}}, "gate needs"},
		"log bad stream":        {&events.LogLine{Ref: ref, Stream: "stdin"}, `stream "stdin"`},
		"progress over 100":     {&events.ProgressEvent{Ref: ref, Attempt: 1, Percent: 150}, "percent 150 is not within 0-100"},
		"progress negative":     {&events.ProgressEvent{Ref: ref, Attempt: 1, Percent: -1}, "percent -1"},
		"progress without node": {&events.ProgressEvent{Ref: fmlRef(), Attempt: 1, Percent: 5}, "node: missing"},
	}
	for name, tc := range cases {
		t.Run(name, func(t *testing.T) {
			env, err := events.NewAt("id", "test", t0, tc.p)
			if err != nil {
				t.Fatal(err)
			}
			err = events.DecodeData(env, newLike(tc.p))
			if !errors.Is(err, events.ErrMalformed) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v, want ErrMalformed containing %q", err, tc.msg)
			}
		})
	}
	// data of one family cannot be read as another
	env, _ := events.NewAt("id", "test", t0, samples()["node_failed"])
	if err := events.DecodeData(env, &events.FormulaEvent{}); !errors.Is(err, events.ErrMalformed) {
		t.Fatalf("node data decoded as a formula event: %v", err)
	}
}

func TestBounds(t *testing.T) {
	long := strings.Repeat("é", 3000) // 6000 bytes
	if e := events.BoundError(long); len(e) > events.MaxErrorBytes || !strings.Contains(e, "bytes cut") || !strings.HasPrefix(e, "éé") {
		t.Errorf("BoundError: %d bytes", len(e))
	}
	tail := events.BoundTail("start"+long+"END", events.MaxTailBytes)
	if len(tail) > events.MaxTailBytes || !strings.HasSuffix(tail, "END") || !utf8Valid(tail) {
		t.Errorf("BoundTail: %d bytes, valid %v", len(tail), utf8Valid(tail))
	}
	if events.BoundTail("short", 10) != "short" || events.BoundError("short") != "short" {
		t.Error("short strings changed")
	}
}

func utf8Valid(s string) bool { return strings.ToValidUTF8(s, "\uFFFD") == s }

// golden compares got with testdata/<name>.golden.json (go test -update
// rewrites it): the wire contract is versioned, so a change shows here.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden.json")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s changed; the wire contract is versioned: add fields, never rename.\ngot:\n%s\nwant:\n%s", path, got, want)
	}
}

func ptr[T any](v T) *T { return &v }

// PeekType reads the type from the head New's envelopes have, and nothing
// else; Parse refuses an envelope with a second type, so that a reader
// that peeks and one that parses decide on the same type.
func TestPeekType(t *testing.T) {
	ev := &events.NodeEvent{Ref: events.Ref{WorkflowID: "w", Workflow: "w", Formula: "f", Host: "h", Node: "n", Operation: dag.OpCreate}, Status: dag.NodeRunning}
	env, err := events.New("executor/x", ev)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(env)
	if got, ok := events.PeekType(b); !ok || got != ev.EventType() {
		t.Fatalf("PeekType = %q, %v; want %q", got, ok, ev.EventType())
	}
	head := `{"specversion":"1.0","id":"i","source":"s","type":"gantry.node.running"`
	for name, in := range map[string]string{
		"spaces":          `{ "specversion":"1.0","id":"i","source":"s","type":"gantry.node.running"}`,
		"another order":   `{"id":"i","specversion":"1.0","source":"s","type":"gantry.node.running"}`,
		"escape in id":    `{"specversion":"1.0","id":"i\"","source":"s","type":"gantry.node.running"}`,
		"escape in type":  `{"specversion":"1.0","id":"i","source":"s","type":"gantry.node.runn\u0069ng"}`,
		"other version":   `{"specversion":"0.3","id":"i","source":"s","type":"gantry.node.running"}`,
		"cut in the type": `{"specversion":"1.0","id":"i","source":"s","type":"gantry.no`,
		"empty":           ``,
	} {
		if got, ok := events.PeekType([]byte(in)); ok {
			t.Errorf("%s: PeekType = %q, want not ok", name, got)
		}
	}
	if got, ok := events.PeekType([]byte(head + `}`)); !ok || got != "gantry.node.running" {
		t.Errorf("PeekType of a bare head = %q, %v", got, ok)
	}
	two := head + `,"time":"2026-01-01T00:00:00Z","datacontenttype":"application/json","type":"gantry.formula.succeeded","data":{"x":1}}`
	if _, err := events.Parse([]byte(two)); !errors.Is(err, events.ErrMalformed) || !strings.Contains(err.Error(), "two types") {
		t.Fatalf("Parse of an envelope with two types: %v, want ErrMalformed naming them", err)
	}
}
