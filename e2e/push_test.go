package e2e

import (
	"bytes"
	"compress/gzip"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// TestViewerCannotControlThroughAPushConsumer: a viewer may read the
// event and log streams, so it may create consumers on them; one with a
// deliver subject (and the endpoints' queue group) makes JetStream deliver
// the stream's messages to that subject in the services' account: to
// state.rebuild, workflow.submit, a control verb. The endpoints answer
// requests only, so nothing is rebuilt (a document only a rebuild would
// delete is still there) and the workflow runs to its end.
func TestViewerCannotControlThroughAPushConsumer(t *testing.T) {
	s := newStack(t, stackOptions{})
	ctx := context.Background()
	c := &dag.Composition{Name: "slow", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "a", Server: "me", Nodes: []dag.Node{{Name: "n", Run: "echo PROGRESS: 10; sleep 3"}}}}}
	id := s.mustSubmit(c)
	state, err := s.js.KeyValue(ctx, events.BucketState)
	if err != nil {
		t.Fatal(err)
	}
	const stray = "wf.stray-document-only-a-rebuild-deletes"
	if _, err := state.Put(ctx, stray, []byte(`{}`)); err != nil {
		t.Fatal(err)
	}
	viewer := s.ns.Connect(events.Viewer)
	targets := []string{events.StateRebuild, events.SubjectSubmit, events.WorkflowControl(id, events.VerbCancel), events.WorkflowControl(id, events.VerbPause)}
	for i, target := range targets {
		for j, stream := range []string{events.StreamEvents, events.StreamLogs} {
			name := "push" + string(rune('a'+i)) + string(rune('a'+j))
			req := `{"stream_name":"` + stream + `","config":{"name":"` + name + `","deliver_subject":"` + target +
				`","deliver_group":"q","deliver_policy":"all","ack_policy":"none","idle_heartbeat":500000000}}`
			// Raw JetStream API request: this tests the bus's permissions.
			if msg, err := viewer.Request("$JS.API.CONSUMER.CREATE."+stream+"."+name, []byte(req), 2*time.Second); err == nil {
				t.Logf("viewer's push consumer on %s to %s: %.200s", stream, target, msg.Data)
			}
		}
	}
	if d := s.wait(id, 30*time.Second); d.Status != dag.WorkflowSucceeded {
		t.Errorf("workflow %s with a viewer's push consumers delivering to its control verbs: want succeeded", d.Status)
	}
	if _, err := state.Get(ctx, stray); err != nil {
		t.Errorf("a viewer's push consumer on %s rebuilt the projection: %s: %v", events.StateRebuild, stray, err)
	}
}

// TestViewerQueryCannotInflateMuch: a query's body may come compressed,
// but it may expand to MaxQueryBytes only: a viewer's 50 kB request does
// not make the state-store inflate 50 MiB (valid JSON: spaces, then {}).
func TestViewerQueryCannotInflateMuch(t *testing.T) {
	s := newStack(t, stackOptions{})
	var buf bytes.Buffer
	zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
	_, _ = zw.Write(bytes.Repeat([]byte(" "), 50<<20))
	_, _ = zw.Write([]byte("{}"))
	_ = zw.Close()
	viewer := s.ns.Connect(events.Viewer)
	msg := &nats.Msg{Subject: events.StateList, Data: buf.Bytes(), Header: nats.Header{eventbus.EncodingHeader: {eventbus.EncodingGzip}}}
	// Raw, not the gantry client: a hand-made malicious body.
	reply, err := viewer.RequestMsg(msg, 10*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if code, desc := reply.Header.Get(micro.ErrorCodeHeader), reply.Header.Get(micro.ErrorHeader); code != "400" || !strings.Contains(desc, "expands past") {
		t.Fatalf("a %d-byte body expanding to 50 MiB: %q %q, want 400 naming the bound", buf.Len(), code, desc)
	}
}
