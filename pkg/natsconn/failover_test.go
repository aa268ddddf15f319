package natsconn_test

import (
	"fmt"
	"log/slog"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
)

// freePort is a port nothing listens on now, to start (and restart) a
// server on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// node is one embedded server (auth on, JetStream on its own directory),
// restartable on the same ports.
type node struct {
	t    *testing.T
	cfg  natsembed.Config
	s    *natsembed.Server
	port int
}

func (n *node) start() {
	n.t.Helper()
	s, err := natsembed.Start(n.cfg)
	if err != nil {
		n.t.Fatal(err)
	}
	n.s = s
}

func (n *node) stop() {
	if n.s != nil {
		n.s.Stop()
		n.s = nil
	}
}

func (n *node) url() string { return "nats://127.0.0.1:" + strconv.Itoa(n.port) }

// nodes starts count servers with one set of keys; clustered, they form
// one cluster with routes to each other.
func nodes(t *testing.T, count int, clustered bool) ([]*node, *busauth.Keys) {
	t.Helper()
	dir := t.TempDir()
	keys, err := busauth.LoadOrCreate(filepath.Join(dir, "auth"), busauth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	routePorts := make([]int, count)
	for i := range routePorts {
		routePorts[i] = freePort(t)
	}
	var out []*node
	for i := range count {
		n := &node{t: t, port: freePort(t)}
		n.cfg = natsembed.Config{Port: n.port, StoreDir: filepath.Join(dir, fmt.Sprint("js-", i)), Auth: keys, Name: fmt.Sprint("n-", i)}
		if clustered {
			c := &natsembed.Cluster{Name: "test", Port: routePorts[i], User: "route", Password: "route-pw"}
			for j, p := range routePorts {
				if j != i {
					c.Routes = append(c.Routes, fmt.Sprintf("nats-route://route:route-pw@127.0.0.1:%d", p))
				}
			}
			n.cfg.Cluster = c
		}
		n.start()
		t.Cleanup(n.stop)
		out = append(out, n)
	}
	return out, keys
}

func urls(ns []*node) string {
	var u []string
	for _, n := range ns {
		u = append(u, n.url())
	}
	return strings.Join(u, ",")
}

// connectAs connects as the executor, as a service does (reconnecting
// for ever), with l's liveness settings.
func connectAs(t *testing.T, keys *busauth.Keys, url string, l natsconn.Liveness, log *slog.Logger) *nats.Conn {
	t.Helper()
	o := natsconn.Options{URL: url, NKey: keys.SeedFile(events.Executor), InboxPrefix: events.Executor.InboxPrefix(), Liveness: l}
	nc, err := natsconn.Connect(o, "gantry-executor", log, true)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nc.Close)
	return nc
}

// kick closes every client connection of s as soon as it sees it, as a
// server that accepts clients and drops them at once would.
func kick(t *testing.T, s *natsembed.Server, stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		if cz, err := s.Connz(&server.ConnzOptions{Limit: 1024}); err == nil {
			for _, c := range cz.Conns {
				_ = s.DisconnectClientByID(c.Cid)
			}
		}
		time.Sleep(time.Millisecond)
	}
}

// TestReconnectsAreBoundedAgainstServersThatDrop: two servers that take a
// client's connection and drop it at once. nats.go waits between tries
// only after a pass over its whole server list, and each dropped
// connection starts a new pass, so the old options (250 ms, no jitter)
// reconnected in a loop, hundreds of times a second; now each try waits,
// doubling up to the cap, while no connection holds.
func TestReconnectsAreBoundedAgainstServersThatDrop(t *testing.T) {
	ns, keys := nodes(t, 2, false)
	var logs syncBuffer
	nc := connectAs(t, keys, urls(ns), natsconn.Liveness{}, slog.New(slog.NewJSONHandler(&logs, nil)))
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	stop := make(chan struct{})
	for _, n := range ns {
		go kick(t, n.s, stop)
	}
	const window = 6 * time.Second
	before := nc.Stats().Reconnects
	time.Sleep(window)
	close(stop)
	got := nc.Stats().Reconnects - before
	// waits of 0.125-0.25, 0.25-0.5, 0.5-1, 1-2, 2-4 s: at most 5 tries in
	// the first 6 s after a connection that held, then one per 4-8 s.
	t.Logf("%d connections made and dropped in %v", got, window)
	if got > 6 {
		t.Fatalf("%d connections made and dropped in %v: reconnects are not bounded", got, window)
	}
	if got < 2 {
		t.Fatalf("%d connections in %v: the client stopped trying", got, window)
	}
}

// TestClientsSpreadAgainAfterServersReturn: three clustered servers;
// after two are stopped every client sits on the third, and nothing made
// them move back when the two returned. Now, within a few looks (Spread)
// after the cluster grows again, the clients are spread over at least
// two servers, and each move is logged.
func TestClientsSpreadAgainAfterServersReturn(t *testing.T) {
	ns, keys := nodes(t, 3, true)
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	const clients = 12
	var conns []*nats.Conn
	for range clients {
		conns = append(conns, connectAs(t, keys, urls(ns), natsconn.Liveness{Spread: time.Second}, log))
	}
	on := func() map[string]int {
		m := map[string]int{}
		for _, nc := range conns {
			m[nc.ConnectedServerName()]++
		}
		return m
	}
	waitFor(t, 20*time.Second, "every client connected", func() bool { return on()[""] == 0 })
	t.Logf("at the start: %v", on())
	ns[1].stop()
	ns[2].stop()
	waitFor(t, 20*time.Second, "every client on the one server left", func() bool { return on()["n-0"] == clients })
	t.Logf("two servers stopped: %v", on())
	returned := time.Now()
	ns[1].start()
	ns[2].start()
	spread := func() bool {
		m := on()
		return m[""] == 0 && len(m) >= 2
	}
	waitFor(t, 20*time.Second, "the clients spread over two servers or more", spread)
	t.Logf("spread %.1f s after the servers returned: %v", time.Since(returned).Seconds(), on())
	time.Sleep(3 * time.Second)
	t.Logf("3 s later: %v; moves logged: %d", on(), strings.Count(logs.String(), "moving to one to spread"))
	if !strings.Contains(logs.String(), "moving to one to spread") {
		t.Errorf("no move logged:\n%s", logs.String())
	}
}

// TestRefusedWhileRestartingKeepsReconnecting: a server that refuses the
// credentials for a while (restarted before its users are back) made
// nats.go close the connection for good after the second refusal, and a
// service then never came back; now it keeps trying and reconnects.
func TestRefusedWhileRestartingKeepsReconnecting(t *testing.T) {
	port := freePort(t)
	s := passwordServer(t, port, "right")
	var logs syncBuffer
	url := "nats://gantry:right@127.0.0.1:" + strconv.Itoa(port)
	nc, err := natsconn.Connect(natsconn.Options{URL: url}, "test", slog.New(slog.NewJSONHandler(&logs, nil)), true)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	s.Shutdown()
	s.WaitForShutdown()
	s = passwordServer(t, port, "other") // refuses "right"
	time.Sleep(4 * time.Second)          // tries refused: at least 4 with the waits' growth
	s.Shutdown()
	s.WaitForShutdown()
	s = passwordServer(t, port, "right")
	defer s.Shutdown()
	waitFor(t, 20*time.Second, "reconnected", func() bool { return nc.IsConnected() || nc.IsClosed() })
	if !nc.IsConnected() {
		t.Fatalf("the connection closed after the server refused it while restarting: %v", nc.LastError())
	}
}

func waitFor(t *testing.T, within time.Duration, what string, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestLameDuckServerIsLeftEarly: a server in lame duck mode (stopping:
// nats-server waits lame_duck_grace_period, 10 s by default, then closes
// its clients one by one) tells its clients so; they move to another
// server within a few seconds, each after a random part of
// lameDuckMoveWithin, not all at once when it closes them.
func TestLameDuckServerIsLeftEarly(t *testing.T) {
	ns, keys := nodes(t, 2, true)
	var logs syncBuffer
	log := slog.New(slog.NewJSONHandler(&logs, nil))
	var conns []*nats.Conn
	for range 6 {
		conns = append(conns, connectAs(t, keys, ns[0].url(), natsconn.Liveness{}, log))
	}
	waitFor(t, 10*time.Second, "the clients know both servers", func() bool {
		for _, nc := range conns {
			if len(nc.Servers()) < 2 {
				return false
			}
		}
		return true
	})
	began := time.Now()
	go ns[0].s.LameDuckShutdown()
	waitFor(t, 8*time.Second, "every client on the other server before the lame duck closes them", func() bool {
		for _, nc := range conns {
			if nc.ConnectedServerName() != "n-1" {
				return false
			}
		}
		return true
	})
	t.Logf("every client moved %.1f s after the server went into lame duck mode", time.Since(began).Seconds())
}
