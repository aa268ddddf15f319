package events_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Payload gives back what was published, as the payload type of the
// event's type, for consumers to type-switch on.
func TestPayloadIsWhatWasPublished(t *testing.T) {
	all := samples()
	all["workflow_pruned"] = &events.WorkflowPruned{Ref: wfRef(), FinalStatus: dag.WorkflowSucceeded, CreatedAt: t0, EndedAt: t1, Reason: "gantry prune --keep 2"}
	for name, want := range all {
		env, err := events.Parse(encode(t, want))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got, err := env.Payload()
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if gt, wt := fmt.Sprintf("%T", got), fmt.Sprintf("%T", want); gt != wt {
			t.Errorf("%s: a %s, want a %s", name, gt, wt)
			continue
		}
		gb, _ := json.Marshal(got)
		wb, _ := json.Marshal(want)
		if !bytes.Equal(gb, wb) {
			t.Errorf("%s: decoded\n%s\nwant\n%s", name, gb, wb)
		}
	}
}

// Every type this version defines has its payload; data that is not that
// payload is malformed, and a type it does not define is unknown.
func TestPayloadOfEveryType(t *testing.T) {
	for _, typ := range append(knownTypes(), events.TypeWorkflowPruned) {
		env := &events.Envelope{Type: typ, Data: json.RawMessage(`{}`)}
		if _, err := env.Payload(); !errors.Is(err, events.ErrMalformed) {
			t.Errorf("%s with empty data: %v, want malformed", typ, err)
		}
		env.Data = json.RawMessage(`[1, 2]`)
		if _, err := env.Payload(); !errors.Is(err, events.ErrMalformed) {
			t.Errorf("%s with an array for data: %v, want malformed", typ, err)
		}
	}
	for _, typ := range []events.Type{"gantry.nope.what", "gantry.node.sleeping", "gantry.work.other", ""} {
		env := &events.Envelope{Type: typ, Data: json.RawMessage(`{}`)}
		if p, err := env.Payload(); p != nil || !errors.Is(err, events.ErrUnknownType) {
			t.Errorf("%q: %v %v, want unknown type", typ, p, err)
		}
	}
}
