package eventbus_test

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go/jetstream"
)

// A service's connection keeps nothing to send while it is down, so what
// it sends before the server is up fails at once: a service started first
// still opens its streams once the server comes up.
func TestServiceStartsBeforeItsServer(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	keys, err := busauth.LoadOrCreate(filepath.Join(t.TempDir(), "auth"), busauth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	nc := serviceConn(t, keys, fmt.Sprintf("nats://127.0.0.1:%d", port), events.Executor)
	opened := make(chan error, 1)
	go func() {
		_, err := eventbus.Open(ctx, nc, events.Executor, 1, slog.New(slog.DiscardHandler))
		opened <- err
	}()
	time.Sleep(time.Second)
	natstest.StartWith(t, natsembed.Config{Port: port, Auth: keys, AnonymousViewer: true})
	if err := <-opened; err != nil {
		t.Fatalf("the executor did not open its streams once the server was up: %v", err)
	}
}

// Output lines fired while the connection is down are not lost with the
// connection's buffer: they are held, and stored in order once it is back.
func TestFireHoldsLinesWhileDisconnected(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ns := natstest.Start(t)
	nc := serviceConn(t, ns.Keys, ns.URL(), events.Executor)
	js, err := eventbus.Open(ctx, nc, events.Executor, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	pub := &eventbus.Publisher{JS: js, NC: nc, Source: "executor/test"}
	ref := events.Ref{WorkflowID: "wf1", Workflow: "w", Formula: "f", Host: "h1", Node: "n", Operation: dag.OpCreate, Generation: 1}
	fire := func(i int) {
		pub.Fire(events.HostLogs("h1", "n"), &events.LogLine{Ref: ref, Attempt: 1, Stream: events.Stdout, Seq: int64(i), Line: fmt.Sprint("line ", i)})
	}
	for i := 1; i <= 3; i++ {
		fire(i)
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	ns.Stop()
	for nc.IsConnected() && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	for i := 4; i <= 6; i++ {
		fire(i)
	}
	ns.StartAgain()
	for (!nc.IsConnected() || nc.Stats().Reconnects == 0) && ctx.Err() == nil {
		time.Sleep(10 * time.Millisecond)
	}
	fire(7)
	var got []string
	for deadline := time.Now().Add(10 * time.Second); len(got) < 7 && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		got = storedLines(ctx, t, ns)
	}
	want := []string{"line 1", "line 2", "line 3", "line 4", "line 5", "line 6", "line 7"}
	if !slices.Equal(got, want) {
		t.Fatalf("log stream holds %q, want %q", got, want)
	}
}

// storedLines are the output lines in the log stream, in order.
func storedLines(ctx context.Context, t *testing.T, ns *natstest.Server) []string {
	t.Helper()
	admin, err := jetstream.New(ns.Connect(busauth.Admin))
	if err != nil {
		t.Fatal(err)
	}
	st, err := admin.Stream(ctx, events.StreamLogs)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for seq := uint64(1); ; seq++ {
		m, err := st.GetMsg(ctx, seq)
		if err != nil {
			return out
		}
		_, ll, err := events.Decode[events.LogLine](m.Data)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, ll.Line)
	}
}
