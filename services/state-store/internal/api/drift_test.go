package api_test

import (
	"context"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/services/state-store/internal/api"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// memDocs is a projection in memory; Keys takes a prefix ending in ">".
type memDocs map[string][]byte

func (d memDocs) Get(_ context.Context, k string) ([]byte, uint64, error) { return d[k], 1, nil }

func (d memDocs) Keys(_ context.Context, filter string) ([]string, error) {
	var keys []string
	for k := range d {
		if strings.HasPrefix(k, strings.TrimSuffix(filter, ">")) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (d memDocs) Values(ctx context.Context, filter string) (map[string][]byte, error) {
	out := map[string][]byte{}
	keys, _ := d.Keys(ctx, filter)
	for _, k := range keys {
		out[k] = d[k]
	}
	return out, nil
}

// driftDoc is a composition of host h whose one node echoes its host.
const driftDoc = `{"name":"d","hosts":{"h":{"transport":"local"}},"formulas":[{"id":"f","server":"h","nodes":[{"name":"n","run":"echo {{ .Host }}"}]}]}`

// TestViewersDriftRendersNothing: a viewer may ask state.drift, so the
// state-store renders no composition for it: the requester sends the
// nodes its composition wants, rendered on its side, and the state-store
// compares their spec hashes with its records. A composition sent in
// their place (which the state-store rendered before, templates and
// all) is refused with a 400 that says what state.drift takes, and so is
// a query whose names are not ones a composition may hold.
func TestViewersDriftRendersNothing(t *testing.T) {
	c, err := dag.ParseJSONComposition([]byte(driftDoc))
	if err != nil {
		t.Fatal(err)
	}
	p := dag.PlanLoaded(c)
	spec := p.Formulas[0].Nodes[0].SpecHash
	hn, _ := json.Marshal(events.HostNode{Host: "h", Workflow: "d", Formula: "f", Node: "n", Status: dag.NodeSucceeded, Operation: dag.OpCreate,
		SpecHash: spec, InPlace: &events.InPlace{Status: dag.NodeSucceeded, SpecHash: spec, WorkflowID: "w1"}})
	docs := memDocs{events.HostNodeKey("h", "d", "f", "n"): hn}

	ns := natstest.Start(t)
	served := ns.Connect(events.StateStore)
	svc, err := api.Register(served, eventbus.ServiceSpec{Version: "0.0.1", Status: func() any { return nil }},
		docs, slog.Default(), nil, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	defer svc.Stop()
	if err := served.Flush(); err != nil {
		t.Fatal(err)
	}
	viewer := ns.Connect(events.Viewer)
	ask := func(body []byte) *nats.Msg {
		t.Helper()
		r, err := viewer.Request(events.StateDrift, body, 5*time.Second)
		if err != nil {
			t.Fatalf("no answer: %v", err)
		}
		return r
	}

	r := ask([]byte(driftDoc))
	if code, why := r.Header.Get(micro.ErrorCodeHeader), r.Header.Get(micro.ErrorHeader); code != "400" || !strings.Contains(why, "state.drift takes the nodes a composition wants") {
		t.Fatalf("a composition sent by a viewer: answered %q %q %.200s, want 400 naming what state.drift takes (nothing rendered)", code, why, r.Data)
	}

	q, _ := json.Marshal(events.DriftQueryOf(p))
	r = ask(q)
	var rep events.DriftReport
	if err := json.Unmarshal(r.Data, &rep); err != nil || r.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("the query: %s %s (%v)", r.Header.Get(micro.ErrorHeader), r.Data, err)
	}
	if rep.Workflow != "d" || len(rep.Items) != 1 || rep.Items[0].Drift != events.DriftOK || rep.Items[0].WantSpec != spec {
		t.Errorf("report %+v, want f/n ok", rep)
	}

	for _, bad := range []string{
		`{"workflow":"d","nodes":[{"host":">","formula":"f","node":"n","spec":"x"}]}`,
		`{"workflow":"*","nodes":[]}`,
		`{"workflow":"d","nodes":[{"host":"h","formula":"f.>","node":"n","spec":"x"}]}`,
	} {
		if r := ask([]byte(bad)); r.Header.Get(micro.ErrorCodeHeader) != "400" {
			t.Errorf("query %s: answered %q %s, want 400", bad, r.Header.Get(micro.ErrorCodeHeader), r.Data)
		}
	}
}
