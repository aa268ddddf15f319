package natsembed_test

import (
	"net"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// freezer is a TCP proxy in front of a server that can stop passing bytes
// either way, as a process stopped with SIGSTOP does: its connections
// stay open, and what the server sends waits in socket buffers unread.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	frozen chan struct{} // closed: pass bytes; open: hold them
}

func newFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target, frozen: make(chan struct{})}
	close(f.frozen)
	t.Cleanup(func() { ln.Close() })
	go f.accept()
	return f
}

func (f *freezer) URL() string { return "nats://" + f.ln.Addr().String() }

func (f *freezer) freeze() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.frozen = make(chan struct{})
}

func (f *freezer) gate() chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.frozen
}

func (f *freezer) accept() {
	for {
		c, err := f.ln.Accept()
		if err != nil {
			return
		}
		s, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		go f.pump(c, s)
		go f.pump(s, c)
	}
}

// pump copies from src to dst while not frozen; frozen, it reads nothing.
func (f *freezer) pump(src, dst net.Conn) {
	defer src.Close()
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		<-f.gate()
		n, err := src.Read(buf)
		if n > 0 {
			<-f.gate()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// replica serves state.workflow as one state-store replica would (a
// micro endpoint in the queue group every replica shares), answering
// with its name.
func replica(t *testing.T, url string, ns *natstest.Server, name string) {
	t.Helper()
	nc, err := nats.Connect(url, ns.Options(events.StateStore, nats.Name(name), nats.NoReconnect())...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	svc, err := micro.AddService(nc, micro.Config{Name: events.StateStore.ServiceName(), Version: "0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	err = svc.AddEndpoint("workflow", micro.HandlerFunc(func(r micro.Request) { _ = r.Respond([]byte(name)) }), micro.WithEndpointSubject(events.StateWorkflow))
	if err != nil {
		t.Fatal(err)
	}
}

func connected(ns *natstest.Server, name string) bool {
	cz, err := ns.Server.Connz(&server.ConnzOptions{Limit: 1024})
	if err != nil {
		return true
	}
	for _, c := range cz.Conns {
		if c.Name == name {
			return true
		}
	}
	return false
}

// TestFrozenClientIsDropped: a replica whose process stops answering
// (SIGSTOP: its connection stays open, nothing is read) is dropped by the
// server within (PingsOut+1)*PingInterval, so it leaves the micro queue
// group, and every request then goes to the replica that answers. With
// nats-server's default (a ping every 2 minutes) it stayed for minutes,
// taking its share of the requests unanswered.
func TestFrozenClientIsDropped(t *testing.T) {
	ns := natstest.Start(t)
	fr := newFreezer(t, ns.Server.Addr().String())
	replica(t, ns.URL(), ns, "healthy")
	replica(t, fr.URL(), ns, "frozen")
	viewer := ns.Connect(events.Viewer)
	seen := map[string]int{}
	for range 40 {
		m, err := viewer.Request(events.StateWorkflow, nil, 2*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		seen[string(m.Data)]++
	}
	if seen["frozen"] == 0 || seen["healthy"] == 0 {
		t.Fatalf("both replicas answer before one freezes: %v", seen)
	}
	fr.freeze()
	frozeAt := time.Now()
	bound := time.Duration(natsembed.PingsOut+1)*natsembed.PingInterval + 2*time.Second
	for connected(ns, "frozen") && time.Since(frozeAt) < bound {
		time.Sleep(100 * time.Millisecond)
	}
	took := time.Since(frozeAt)
	if connected(ns, "frozen") {
		t.Fatalf("the frozen replica is still connected %v after it froze (bound %v)", took.Round(100*time.Millisecond), bound)
	}
	t.Logf("the frozen replica was dropped %.1f s after it froze (bound %v)", took.Seconds(), bound)
	for i := range 20 {
		m, err := viewer.Request(events.StateWorkflow, nil, time.Second)
		if err != nil || string(m.Data) != "healthy" {
			t.Fatalf("request %d after the drop: %v %v", i, m, err)
		}
	}
}
