package natsconn

import (
	"bufio"
	"encoding/json"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// spreader moves a service's connection back onto the servers that
// rejoin the cluster after it lost its own: once a node stopped, its
// clients all sit on the others, and nothing moved them back when it
// returned.
//
// A connection that was lost (not moved on purpose) is displaced. When it
// reconnects it reads which servers its new server's cluster has (the
// INFO a server sends first on any new connection: the client URLs of the
// servers routed to it, itself included), and then again every Spread
// (give or take a quarter, at random). As soon as a server is in the
// cluster that was not when it was displaced, or that left since, the
// connection moves to it (to one of them at random), once, logged, and is
// no longer displaced. The clients a node lost go back to the nodes that
// return, a few at a time (each at its own look), and the others stay
// where they are: the spread from before the failover comes back.
type spreader struct {
	nc    *nats.Conn
	f     *failover
	every time.Duration
	log   *slog.Logger

	mu       sync.Mutex
	server   string          // the server id the cluster was read at
	baseline map[string]bool // the cluster then, less those that left since
	blind    bool            // the last read failed (logged once)
}

func (s *spreader) run() {
	t := time.NewTimer(s.interval())
	defer t.Stop()
	for range t.C {
		if s.nc.IsClosed() {
			return
		}
		s.look()
		t.Reset(s.interval())
	}
}

func (s *spreader) interval() time.Duration {
	return s.every*3/4 + rand.N(s.every/2+1)
}

// connected reads the cluster at once when the connection came up: what
// a displaced connection will wait to see rejoin.
func (s *spreader) connected() {
	members, server, ok := s.read()
	if !ok {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.server, s.baseline = server, members
}

// read is the cluster of the server connected to, and that server's id.
func (s *spreader) read() (map[string]bool, string, bool) {
	if !s.nc.IsConnected() {
		return nil, "", false
	}
	server := s.nc.ConnectedServerId()
	members, err := clusterOf(s.nc.ConnectedAddr(), 2*time.Second)
	s.mu.Lock()
	defer s.mu.Unlock()
	if err != nil {
		if !s.blind {
			s.log.Info("cannot read the NATS cluster's servers; not spreading for now", "err", err)
		}
		s.blind = true
		return nil, "", false
	}
	s.blind = false
	return members, server, true
}

// look moves a displaced connection to a server that joined.
func (s *spreader) look() {
	members, server, ok := s.read()
	if !ok {
		return
	}
	to, joined := s.joined(members, server)
	if to == "" || !s.f.moveTo(to) {
		return
	}
	s.log.Info("nats servers joined the cluster: moving to one to spread the connections", "from", s.nc.ConnectedUrlRedacted(), "to", to, "joined", joined, "servers", len(members))
	_ = s.nc.ForceReconnect()
}

// joined updates the baseline with members and returns one of the
// servers that joined since, at random, if the connection is displaced.
func (s *spreader) joined(members map[string]bool, server string) (string, int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if server != s.server || s.baseline == nil {
		s.server, s.baseline = server, members
		return "", 0
	}
	var joined []string
	for m := range members {
		if !s.baseline[m] {
			joined = append(joined, m)
		}
	}
	for m := range s.baseline {
		if !members[m] {
			delete(s.baseline, m) // left: it counts as joined when it returns
		}
	}
	if len(joined) == 0 || !s.f.isDisplaced() {
		return "", 0
	}
	return joined[rand.N(len(joined))], len(joined)
}

// clusterOf reads the client URLs of the cluster of the server at addr
// (host:port) from the INFO it sends on a new connection; then it hangs
// up, before any CONNECT.
func clusterOf(addr string, timeout time.Duration) (map[string]bool, error) {
	c, err := net.DialTimeout("tcp", addr, timeout)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	line, err := bufio.NewReaderSize(c, 64<<10).ReadSlice('\n')
	if err != nil {
		return nil, err
	}
	body, ok := strings.CutPrefix(string(line), "INFO ")
	if !ok {
		return nil, errors.New("the server did not start with INFO")
	}
	var info struct {
		ConnectURLs []string `json:"connect_urls"`
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(body)), &info); err != nil {
		return nil, err
	}
	members := map[string]bool{}
	for _, u := range info.ConnectURLs {
		members[u] = true
	}
	return members, nil
}
