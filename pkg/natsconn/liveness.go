package natsconn

import (
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Liveness says how a connection finds out that its server is gone, how
// soon it tries the others, and how a service's connection spreads back
// over a cluster's servers. Zero fields take the defaults below (Spread:
// zero is off).
type Liveness struct {
	PingInterval time.Duration // --nats-ping-interval: how often the client pings its server
	PingsOut     int           // --nats-pings-out: pings unanswered before the server is taken for gone
	// ReconnectWait is the wait before the first try after a connection
	// is lost (half of it to all of it, at random); each try that does not
	// hold (see heldAfter) doubles it, up to ReconnectMaxWait.
	ReconnectWait    time.Duration // --nats-reconnect-wait
	ReconnectMaxWait time.Duration // --nats-reconnect-max-wait
	// Spread is how often a service checks whether servers joined its
	// server's cluster (a node that came back), and then moves to one of
	// them with the odds that spread the clients evenly (see spreader).
	Spread time.Duration // --nats-spread; 0: never
}

// The defaults: a server that stops answering is left after 10 to 15 s
// (nats.go's own default pings every 2 minutes); tries wait 0.125-0.25 s,
// then twice as long each, up to 4-8 s.
const (
	DefaultPingInterval     = 5 * time.Second
	DefaultPingsOut         = 2
	DefaultReconnectWait    = 250 * time.Millisecond
	DefaultReconnectMaxWait = 8 * time.Second
	DefaultSpread           = 30 * time.Second
)

// registerLiveness adds the --nats-* liveness flags with their defaults.
func (l *Liveness) registerLiveness(fs *flag.FlagSet) {
	fs.DurationVar(&l.PingInterval, "nats-ping-interval", DefaultPingInterval, "how often to ping the NATS server; after --nats-pings-out unanswered pings the connection moves to another server")
	fs.IntVar(&l.PingsOut, "nats-pings-out", DefaultPingsOut, "unanswered pings before the NATS server is taken for gone")
	fs.DurationVar(&l.ReconnectWait, "nats-reconnect-wait", DefaultReconnectWait, "wait before the first reconnect try (half of it to all of it, at random); doubled for each try that does not hold")
	fs.DurationVar(&l.ReconnectMaxWait, "nats-reconnect-max-wait", DefaultReconnectMaxWait, "the longest wait between reconnect tries")
	fs.DurationVar(&l.Spread, "nats-spread", DefaultSpread, "how often to check whether NATS servers joined the cluster, to move to one of them with the odds that spread the connections evenly; 0: never")
}

// withDefaults fills the zero fields but Spread.
func (l Liveness) withDefaults() Liveness {
	if l.PingInterval <= 0 {
		l.PingInterval = DefaultPingInterval
	}
	if l.PingsOut <= 0 {
		l.PingsOut = DefaultPingsOut
	}
	if l.ReconnectWait <= 0 {
		l.ReconnectWait = DefaultReconnectWait
	}
	if l.ReconnectMaxWait < l.ReconnectWait {
		l.ReconnectMaxWait = max(DefaultReconnectMaxWait, l.ReconnectWait)
	}
	return l
}

// fromEnv fills the zero fields from their GANTRY_NATS_* variables (the
// CLI has no flags for them).
func (l *Liveness) fromEnv(getenv func(string) string) error {
	for _, d := range []struct {
		flag string
		dst  *time.Duration
	}{{"nats-ping-interval", &l.PingInterval}, {"nats-reconnect-wait", &l.ReconnectWait}, {"nats-reconnect-max-wait", &l.ReconnectMaxWait}, {"nats-spread", &l.Spread}} {
		v := getenv(livenessEnv(d.flag))
		if *d.dst != 0 || v == "" {
			continue
		}
		x, err := time.ParseDuration(v)
		if err != nil {
			return fmt.Errorf("%w: $%s: %w", ErrBadOptions, livenessEnv(d.flag), err)
		}
		*d.dst = x
	}
	if v := getenv(livenessEnv("nats-pings-out")); l.PingsOut == 0 && v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("%w: $%s: %w", ErrBadOptions, livenessEnv("nats-pings-out"), err)
		}
		l.PingsOut = n
	}
	return nil
}

// livenessEnv is the variable of a --nats-* flag: GANTRY_NATS_<NAME>.
func livenessEnv(flagName string) string {
	return "GANTRY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}
