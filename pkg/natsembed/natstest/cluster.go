package natstest

import (
	"context"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Cluster is a JetStream cluster of embedded servers on loopback, each
// with its own storage, all with gantry's accounts and permissions as in
// production, routes authenticated with a route user. A node can be
// stopped and started again on the same ports and storage. Clients are
// not told of nodes they were not given (a client of one node stays off
// the cluster while that node is down).
type Cluster struct {
	Keys  *busauth.Keys
	cfgs  []natsembed.Config
	nodes []*natsembed.Server // nil while stopped
	t     testing.TB
}

// StartCluster starts n clustered servers and waits until JetStream
// answers. They stop when the test ends.
func StartCluster(t testing.TB, n int) *Cluster {
	t.Helper()
	dir := t.TempDir()
	keys, err := busauth.LoadOrCreate(filepath.Join(dir, "auth"), busauth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	c := &Cluster{Keys: keys, t: t, nodes: make([]*natsembed.Server, n)}
	routePorts := freePorts(t, n)
	clientPorts := freePorts(t, n)
	for i := range n {
		var routes []string
		for j, p := range routePorts {
			if j != i {
				routes = append(routes, fmt.Sprintf("nats-route://route:route-pass@127.0.0.1:%d", p))
			}
		}
		c.cfgs = append(c.cfgs, natsembed.Config{
			Port: clientPorts[i], StoreDir: filepath.Join(dir, fmt.Sprintf("js-%d", i)), Auth: keys, AnonymousViewer: true,
			Name:    fmt.Sprintf("node-%d", i),
			Cluster: &natsembed.Cluster{Name: "test", Port: routePorts[i], Routes: routes, User: "route", Password: "route-pass", NoAdvertise: true},
		})
	}
	t.Cleanup(func() {
		for i := range c.nodes {
			c.Stop(i)
		}
	})
	for i := range n {
		c.Start(i)
	}
	c.waitJetStream()
	return c
}

// freePorts returns n loopback ports free at the time of the call.
func freePorts(t testing.TB, n int) []int {
	t.Helper()
	var ports []int
	var ls []net.Listener
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		ls = append(ls, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	for _, l := range ls {
		_ = l.Close()
	}
	return ports
}

// Start starts node i (again).
func (c *Cluster) Start(i int) {
	c.t.Helper()
	if c.nodes[i] != nil {
		return
	}
	ns, err := natsembed.Start(c.cfgs[i])
	if err != nil {
		c.t.Fatalf("node %d: %v", i, err)
	}
	c.nodes[i] = ns
}

// Stop stops node i; a stopped node's storage stays.
func (c *Cluster) Stop(i int) {
	if c.nodes[i] != nil {
		c.nodes[i].Stop()
		c.nodes[i] = nil
	}
}

// Name is node i's server name.
func (c *Cluster) Name(i int) string { return c.cfgs[i].Name }

// URL is node i's client URL.
func (c *Cluster) URL(i int) string { return fmt.Sprintf("nats://127.0.0.1:%d", c.cfgs[i].Port) }

// URLs are every node's client URL, comma-separated.
func (c *Cluster) URLs() string {
	var urls []string
	for i := range c.cfgs {
		urls = append(urls, c.URL(i))
	}
	return strings.Join(urls, ",")
}

// Options are the connection options of identity id (see Server.Options).
func (c *Cluster) Options(id events.Identity, extra ...nats.Option) []nats.Option {
	c.t.Helper()
	return options(c.t, c.Keys, id, extra...)
}

// Connect connects as identity id to urls (URLs, or URL of one node); the
// connection closes when the test ends.
func (c *Cluster) Connect(urls string, id events.Identity, extra ...nats.Option) *nats.Conn {
	c.t.Helper()
	nc, err := nats.Connect(urls, c.Options(id, extra...)...)
	if err != nil {
		c.t.Fatalf("connect as %s: %v", id, err)
	}
	c.t.Cleanup(nc.Close)
	return nc
}

// waitJetStream waits until the cluster's JetStream answers an
// administrator (a meta leader is elected), for at most 30 s.
func (c *Cluster) waitJetStream() {
	c.t.Helper()
	js, err := jetstream.New(c.Connect(c.URLs(), busauth.Admin))
	if err != nil {
		c.t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		_, err := js.AccountInfo(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("JetStream of the cluster not ready after 30s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// StreamLeader is the index of the node leading stream, waiting up to
// 30 s for one.
func (c *Cluster) StreamLeader(ctx context.Context, js jetstream.JetStream, stream string) int {
	c.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if st, err := js.Stream(ctx, stream); err == nil {
			if info := st.CachedInfo(); info.Cluster != nil {
				for i := range c.cfgs {
					if info.Cluster.Leader == c.Name(i) {
						return i
					}
				}
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			c.t.Fatalf("stream %s has no leader", stream)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
