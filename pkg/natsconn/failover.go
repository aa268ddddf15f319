package natsconn

import (
	"log/slog"
	"math/rand/v2"
	"net/url"
	"sync"
	"time"

	"github.com/nats-io/nats.go"
)

// heldAfter is how long a connection must stay up to count as held: the
// reconnect waits start over only then. A server that takes connections
// and drops them at once (any reason) is tried with growing waits, not in
// a loop.
const heldAfter = 10 * time.Second

// failover chooses, for one connection, which server each reconnect try
// goes to and how long it waits first.
//
// nats.go's own waits (ReconnectWait, ReconnectJitter,
// CustomReconnectDelay) come only after a whole pass over its server list,
// and every lost connection starts a new pass: against servers that
// accept and then drop a client, a client with three servers in its list
// reconnected in a loop, thousands of times a minute. Here every try
// waits, with jitter (so clients that lost the same server do not come
// back in step), doubling while no connection holds.
type failover struct {
	cfg Liveness
	log *slog.Logger

	mu      sync.Mutex
	tries   int       // tries since the last connection that held
	upSince time.Time // when the connection last came up (zero: since tried again)
	current string    // host:port of the server connected to (or last tried)
	failed  map[string]time.Time
	target  string // host:port the next try goes to at once (spreading)
	// displaced: the connection was lost, not moved on purpose; a
	// spreader moves it to a server that rejoins the cluster.
	displaced bool
	onUp      func() // called (in its own goroutine) when a connection comes up
}

func newFailover(cfg Liveness, log *slog.Logger) *failover {
	return &failover{cfg: cfg.withDefaults(), log: log, failed: map[string]time.Time{}}
}

// options are the connection options of the policy.
func (f *failover) options() []nats.Option {
	return []nats.Option{
		nats.PingInterval(f.cfg.PingInterval),
		nats.MaxPingsOutstanding(f.cfg.PingsOut),
		nats.ReconnectToServer(f.next),
		nats.ConnectHandler(f.up),
		nats.LameDuckModeHandler(f.lameDuck),
	}
}

// up records a connection that came up.
func (f *failover) up(nc *nats.Conn) {
	host := ""
	if u := nc.ConnectedUrl(); u != "" {
		host = hostOf(u)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.upSince = time.Now()
	if host != "" {
		f.current = host
		delete(f.failed, host)
	}
	if f.onUp != nil {
		go f.onUp()
	}
}

func (f *failover) setOnUp(fn func()) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.onUp = fn
}

func (f *failover) isDisplaced() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.displaced
}

// next is nats.ReconnectToServer's handler: it runs under the
// connection's lock, so it must not call the connection.
func (f *failover) next(servers []nats.Server, _ nats.ServerInfo) (*nats.Server, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	now := time.Now()
	if i := f.find(servers, f.target); f.target != "" && i >= 0 {
		f.target, f.tries, f.upSince, f.displaced = "", 0, time.Time{}, false
		f.current = servers[i].URL.Host
		return &servers[i], 0
	}
	f.target, f.displaced = "", true
	if f.upSince.IsZero() || now.Sub(f.upSince) < heldAfter {
		if f.current != "" {
			f.failed[f.current] = now // it did not hold
		}
	} else {
		f.tries = 0
	}
	f.upSince = time.Time{}
	f.tries++
	i := f.pick(servers, now)
	f.current = servers[i].URL.Host
	return &servers[i], f.wait()
}

// wait is the try's wait: d/2 to d, d doubling per try up to the cap.
func (f *failover) wait() time.Duration {
	d := f.cfg.ReconnectWait
	for i := 1; i < f.tries && d < f.cfg.ReconnectMaxWait; i++ {
		d *= 2
	}
	d = min(d, f.cfg.ReconnectMaxWait)
	return d/2 + rand.N(d/2+1)
}

// pick chooses a server at random: not the one just lost or tried, nor
// one that failed lately, while there are others.
func (f *failover) pick(servers []nats.Server, now time.Time) int {
	var fresh, others []int
	for i, s := range servers {
		h := s.URL.Host
		if h == f.current {
			continue
		}
		others = append(others, i)
		if t, bad := f.failed[h]; !bad || now.Sub(t) > 2*f.cfg.ReconnectMaxWait {
			fresh = append(fresh, i)
		}
	}
	switch {
	case len(fresh) > 0:
		return fresh[rand.N(len(fresh))]
	case len(others) > 0:
		return others[rand.N(len(others))]
	}
	return rand.N(len(servers))
}

func (f *failover) find(servers []nats.Server, host string) int {
	for i, s := range servers {
		if host != "" && s.URL.Host == host {
			return i
		}
	}
	return -1
}

// moveTo makes the next try go to host at once; false when a try is
// already set.
func (f *failover) moveTo(host string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.target != "" || host == f.current {
		return false
	}
	f.target = host
	return true
}

// lameDuck moves off a server going into lame duck mode (stopping: it
// closes its clients over a while), after a random part of a few
// seconds, so its clients do not all move at once; the next try avoids it.
func (f *failover) lameDuck(nc *nats.Conn) {
	f.mu.Lock()
	f.failed[f.current] = time.Now()
	f.mu.Unlock()
	delay := rand.N(lameDuckMoveWithin)
	f.log.Info("nats server going into lame duck mode: moving to another", "url", nc.ConnectedUrlRedacted(), "in", delay.Round(time.Millisecond))
	time.AfterFunc(delay, func() {
		if nc.IsConnected() {
			_ = nc.ForceReconnect()
		}
	})
}

// lameDuckMoveWithin spreads the moves off a server in lame duck mode;
// the cluster's servers wait 5 s (lame_duck_grace_period) before they
// start closing their clients.
const lameDuckMoveWithin = 4 * time.Second

// hostOf is the host:port of a server URL.
func hostOf(u string) string {
	if pu, err := url.Parse(u); err == nil && pu.Host != "" {
		return pu.Host
	}
	return u
}
