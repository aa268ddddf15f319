package events_test

import (
	"encoding/json"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// FuzzDecode feeds arbitrary bytes to the parser and to every payload
// decoder: they return an error or a valid payload, never panic.
func FuzzDecode(f *testing.F) {
	for _, p := range samples() {
		env, _ := events.NewAt("id", "src", t0, p)
		b, _ := jsonMarshal(env)
		f.Add(b)
	}
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"gantry.node.failed","data":{"attempt":-1}}`))
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"gantry.progress.update","data":{"workflow_id":"w","workflow":"w","formula":"f","host":"h","node":"n","operation":"create","attempt":1,"percent":101}}`))
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"gantry.node.running","data":{"workflow_id":"w","workflow":"w","formula":"f","host":"10.0.0.5","node":"n","operation":"create","status":"running"}}`))
	f.Add([]byte(`{"specversion":"1.0","id":"x","source":"s","type":"gantry.node.running","type":"gantry.formula.succeeded","data":{"workflow_id":"w"}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		peeked, peekOK := events.PeekType(b)
		env, err := events.Parse(b)
		if err != nil {
			return
		}
		if peekOK && peeked != env.Type {
			t.Fatalf("PeekType says %q, Parse %q: a consumer that skips by the first decides otherwise than one that reads", peeked, env.Type)
		}
		for _, p := range []events.Payload{&events.WorkflowEvent{}, &events.FormulaEvent{}, &events.NodeEvent{}, &events.HealthEvent{},
			&events.LogLine{}, &events.Dispatch{}, &events.GateRequest{}, &events.RolloutEvent{}, &events.ProgressEvent{}} {
			if events.DecodeData(env, p) == nil {
				if err := p.Validate(); err != nil {
					t.Fatalf("decoded payload fails validation: %v", err)
				}
			}
		}
		_, _ = events.ParseSubject(string(b))
	})
}

// FuzzParseSubject: a subject parses or is refused; a host's part is
// always a host token, which a host name with dots never is.
func FuzzParseSubject(f *testing.F) {
	for _, s := range []string{"decky.10_0_0_5.logs.n", "decky.web-1.example.com.lifecycle", "decky.cp-0.dispatch._", "decky.h.dispatch.eu-1",
		"workflow.abc.cancel", "state.host", "decky..lifecycle", "decky.*.lifecycle"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		sub, err := events.ParseSubject(s)
		if err != nil || sub.Host == "" {
			return
		}
		if !dag.IsHostToken(sub.Host) || dag.HostToken(sub.Host) != sub.Host {
			t.Fatalf("%q: host %q is not a host token", s, sub.Host)
		}
	})
}

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
