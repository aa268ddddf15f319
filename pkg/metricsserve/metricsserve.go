// Package metricsserve serves the Prometheus metrics of a gantry process
// (everything registered on prometheus.DefaultRegisterer) at /metrics on
// the address of --metrics (GANTRY_METRICS_ADDR). Off unless an address
// is given. Every process serves its metrics at one endpoint only: a
// second endpoint of the same process would serve the same series, and a
// Prometheus scraping both would count everything twice.
//
// Every process that serves metrics has gantry_build_info{version,
// commit, go} 1: the build it runs.
package metricsserve

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Env is the environment variable --metrics defaults to.
const Env = "GANTRY_METRICS_ADDR"

// Path is where the metrics are served.
const Path = "/metrics"

// Usage is the help of --metrics.
const Usage = "serve Prometheus metrics at http://ADDR" + Path + " (e.g. 127.0.0.1:9464; keep it on loopback or a private network) ($" + Env + "; default off)"

// BuildInfoName is the gauge that names the build a process runs.
const BuildInfoName = "gantry_build_info"

func init() {
	prometheus.MustRegister(buildInfo())
}

// buildInfo is the gauge BuildInfoName, set.
func buildInfo() prometheus.Collector {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: BuildInfoName,
		Help: "Always 1: the build of gantry this process runs, its version, VCS commit and Go version as labels.",
	}, []string{"version", "commit", "go"})
	g.WithLabelValues(buildinfo.Version(), buildinfo.Commit(), runtime.Version()).Set(1)
	return g
}

// Only is the handler of the metrics of gs, with the build's, the Go
// runtime's and the process's, and nothing of the default registry: for
// a process that links packages whose metrics it does not run (gantry
// ui links every service's, which would be served at 0).
func Only(gs ...prometheus.Gatherer) http.Handler {
	own := prometheus.NewRegistry()
	own.MustRegister(buildInfo(), collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return promhttp.HandlerFor(append(prometheus.Gatherers{own}, gs...), promhttp.HandlerOpts{})
}

// Metrics is the handler of the metrics themselves (the default
// registry), for a server that serves them on a path of its own choosing
// (the web view's /metrics).
func Metrics() http.Handler { return promhttp.Handler() }

// Handler serves GET /metrics (and nothing else: 404, or 405 for another
// method).
func Handler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET "+Path, Metrics()) // GET (and HEAD) only: it reads
	return mux
}

// Start listens on addr and serves Handler until ctx ends. An empty addr
// serves nothing and returns a nil address. A bad or busy address is an
// error at once.
func Start(ctx context.Context, addr string, log *slog.Logger) (net.Addr, error) {
	if addr == "" {
		return nil, nil
	}
	if log == nil {
		log = slog.Default()
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("--metrics %s: %w", addr, err)
	}
	srv := &http.Server{Handler: Handler(), ReadHeaderTimeout: 5 * time.Second, ReadTimeout: 10 * time.Second, WriteTimeout: 30 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
	}()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("metrics server stopped", "addr", ln.Addr().String(), "err", err)
		}
	}()
	log.Info("serving metrics", "url", "http://"+ln.Addr().String()+Path)
	return ln.Addr(), nil
}
