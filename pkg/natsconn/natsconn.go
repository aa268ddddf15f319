// Package natsconn connects gantry's processes to NATS with the same
// options everywhere: a name, reconnecting forever, and logged state
// changes.
package natsconn

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	_ "net/http/pprof" // served only when GANTRY_PPROF names an address
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/nats-io/nats.go"
)

// DefaultURL is used when neither --server nor NATS_URL is given.
const DefaultURL = "nats://127.0.0.1:4222"

// URL returns flagValue, else $NATS_URL, else DefaultURL.
func URL(flagValue string) string {
	if flagValue != "" {
		return flagValue
	}
	if u := os.Getenv("NATS_URL"); u != "" {
		return u
	}
	return DefaultURL
}

// Connect connects as name ("gantry-executor"). Services keep reconnecting
// for as long as they run; a one-shot CLI call should pass retry=false.
func Connect(url, name string, log *slog.Logger, retry bool) (*nats.Conn, error) {
	if log == nil {
		log = slog.Default()
	}
	opts := []nats.Option{
		nats.Name(name),
		nats.ReconnectWait(250 * time.Millisecond),
		nats.DisconnectErrHandler(func(_ *nats.Conn, err error) {
			if err != nil {
				log.Warn("nats disconnected", "err", err)
			}
		}),
		nats.ReconnectHandler(func(c *nats.Conn) { log.Info("nats reconnected", "url", c.ConnectedUrl()) }),
	}
	if retry {
		opts = append(opts, nats.MaxReconnects(-1), nats.RetryOnFailedConnect(true))
	} else {
		opts = append(opts, nats.Timeout(5*time.Second))
	}
	nc, err := nats.Connect(url, opts...)
	if err != nil {
		return nil, fmt.Errorf("connect to NATS at %s: %w", url, err)
	}
	return nc, nil
}

// ServiceFlags are the flags every service takes.
type ServiceFlags struct {
	URL      string // --server, default $NATS_URL
	Replicas int    // --replicas
}

// Register adds --server and --replicas to fs.
func (f *ServiceFlags) Register(fs *flag.FlagSet) {
	fs.StringVar(&f.URL, "server", os.Getenv("NATS_URL"), "NATS URL ($NATS_URL)")
	fs.IntVar(&f.Replicas, "replicas", 1, "JetStream replicas for streams this service creates")
}

// Instance names this process in events and logs: "<service>/<host>-<pid>".
func Instance(service string) string {
	host, _ := os.Hostname()
	return fmt.Sprintf("%s/%s-%d", service, host, os.Getpid())
}

// Main runs a service process: it serves pprof when GANTRY_PPROF names an
// address, connects as name (reconnecting forever), runs run until SIGINT
// or SIGTERM, then drains the connection so work in flight is settled. It
// returns the process exit code.
func Main(name, url string, log *slog.Logger, run func(ctx context.Context, nc *nats.Conn) error) int {
	if addr := os.Getenv("GANTRY_PPROF"); addr != "" {
		go func() { log.Warn("pprof", "err", http.ListenAndServe(addr, nil)) }()
	}
	nc, err := Connect(URL(url), "gantry-"+name, log, true)
	if err != nil {
		log.Error("start", "err", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	err = run(ctx, nc)
	_ = nc.Drain()
	if err != nil {
		log.Error(name+" stopped", "err", err)
		return 1
	}
	log.Info(name + " stopped")
	return 0
}
