package events_test

import (
	"encoding/json"
	"testing"

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
	f.Fuzz(func(t *testing.T, b []byte) {
		env, err := events.Parse(b)
		if err != nil {
			return
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

func jsonMarshal(v any) ([]byte, error) { return json.Marshal(v) }
