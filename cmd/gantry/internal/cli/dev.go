package cli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack"
	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/internal/servicemain"
	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	executor "github.com/gantry-dev/gantry/services/executor/service"
	healthgate "github.com/gantry-dev/gantry/services/health-gate/service"
	planner "github.com/gantry-dev/gantry/services/planner/service"
	statestore "github.com/gantry-dev/gantry/services/state-store/service"
	"github.com/spf13/cobra"
	"golang.org/x/sys/unix"
)

func newDevCmd() *cobra.Command {
	var port int
	var dataDir, logLevel string
	var syncAlways bool
	var httpAddr, traceURL string
	var metrics, pprofAddr string
	var svc devServices
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run NATS (JetStream embedded) and all four services in this process",
		Long: `dev is the zero-setup gantry: an embedded NATS server with JetStream on
local storage under --data-dir, plus the planner, executor, health-gate and
state-store. Authentication is on: it writes an nkey seed per identity to
<data-dir>/auth (operator, viewer and each service), runs each service as
its own identity, and treats a client with no credentials as a viewer (it
may watch, not submit or control). With --http ADDR it also serves the web
view there (see gantry ui), connected as the viewer. The gantry CLI on this machine finds the
operator's key by itself. It prints the NATS URL, then runs until
interrupted, when it finishes the work in flight and stops: within 30 s,
or at once on a second interrupt (commands still running on hosts then
finish there, and their results are read at the next start).

Commands of hosts with transport local run as this process's user, with a
small clean environment; --allow-local=false refuses them. Secrets that
commands name ({secret: NAME}) are read from --secrets-dir, one file each;
the files nodes place as source, from --files-dir.

It takes every flag of the planner, executor, health-gate and state-store
(not the NATS connection's: it runs its own server), each also set by the
environment variable its help names, as the services take them.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkTraceURL(traceURL); err != nil {
				return err
			}
			var lvl slog.Level
			if err := lvl.UnmarshalText([]byte(logLevel)); err != nil {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--log-level: %w", err)}
			}
			if port < 0 || port > 65535 {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--port %d: a TCP port is 1 to 65535 (0 picks a free one)", port)}
			}
			if err := svc.configure(os.LookupEnv, cmd.Flags().Changed); err != nil {
				return &exitError{code: ExitUsage, err: err}
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
			servicemain.ServePProf(pprofAddr, log)
			if dataDir == "" {
				d, err := defaultDataDir()
				if err != nil {
					return &exitError{code: ExitProblem, err: fmt.Errorf("data dir: %w (or give --data-dir)", err)}
				}
				dataDir = d
			}
			if err := os.MkdirAll(dataDir, 0o755); err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			unlock, err := lockDataDir(dataDir)
			if err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			defer unlock()
			if err := checkStoreSpace(dataDir, freeSpace); err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			keys, err := busauth.LoadOrCreate(filepath.Join(dataDir, "auth"))
			if err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			ns, err := natsembed.Start(natsembed.Config{Port: port, StoreDir: filepath.Join(dataDir, "jetstream"), SyncAlways: syncAlways, Auth: keys, AnonymousViewer: true, Log: log})
			if err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			defer ns.Stop()
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "gantry dev: NATS with JetStream at %s (data in %s)\n", ns.URL(), dataDir)
			fmt.Fprintf(out, "  export NATS_URL=%s\n", ns.URL())
			fmt.Fprintf(out, "  operator: --nkey %s (this machine's gantry CLI finds it by itself); no credentials: viewer\n", keys.SeedFile(events.Operator))
			if remove, err := writeDevNote(strconv.Itoa(ns.Addr().(*net.TCPAddr).Port), keys.SeedFile(events.Operator)); err == nil {
				defer remove()
			} else {
				log.Warn("the CLI will not find the operator's key by itself", "err", err)
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			stopped := make(chan struct{})
			defer close(stopped)
			go boundStop(ctx, cmd.Context(), stop, stopped, cmd.ErrOrStderr(), DevStopWait, os.Exit)
			if httpAddr != "" {
				creds, nkey := keys.Credentials(events.Viewer)
				vnc, err := natsconn.Connect(natsconn.Options{URL: ns.URL(), Creds: creds, NKey: nkey}, "gantry-dev-ui", log, false)
				if err != nil {
					return &exitError{code: ExitProblem, err: fmt.Errorf("web view: %w", err)}
				}
				defer vnc.Close()
				srv := &webview.Server{Src: &webview.NATS{Client: client.New(vnc, 10*time.Second)}, Log: log, TraceURL: traceURL, Metrics: webViewMetrics(metrics)}
				wait, err := startWebView(ctx, out, "gantry dev", httpAddr, srv)
				if err != nil {
					return err
				}
				defer func() { stop(); _ = wait() }()
			}
			if addr, err := metricsserve.Start(ctx, metrics, log); err != nil {
				return &exitError{code: ExitUsage, err: err}
			} else if addr != nil {
				fmt.Fprintf(out, "  metrics: http://%s%s\n", addr, metricsserve.Path)
			}
			tracers, flush, err := devstack.EnvTracers(ctx, os.Getenv)
			if err != nil {
				return &exitError{code: ExitProblem, err: fmt.Errorf("trace export: %w", err)}
			}
			defer flush()
			if err := devstack.Run(ctx, devstack.Config{Conn: natsconn.Options{URL: ns.URL()}, Keys: keys, Log: log, Tracer: tracers,
				Planner: svc.planner, Executor: svc.executor, HealthGate: svc.healthGate, StateStore: svc.stateStore}); err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 4222, "NATS client port (0 picks a free one)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "where JetStream stores data (default $XDG_DATA_HOME/gantry/dev, else ~/.local/share/gantry/dev)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().BoolVar(&syncAlways, "sync-always", false, "fsync every JetStream write (survives power loss; slower)")
	cmd.Flags().AddGoFlagSet(svc.flags())
	cmd.Flags().StringVar(&httpAddr, "http", "", "also serve the web view (and /metrics, unless --metrics is given) on this address, e.g. 127.0.0.1:8080, reading as the viewer")
	traceURLFlag(cmd, &traceURL)
	cmd.Flags().StringVar(&metrics, "metrics", os.Getenv(metricsserve.Env), "serve the Prometheus metrics of every service at http://ADDR/metrics, e.g. 127.0.0.1:9464, and not on the web view's address (default $"+metricsserve.Env+", else off)")
	cmd.Flags().StringVar(&pprofAddr, "pprof", os.Getenv("GANTRY_PPROF"), servicemain.PProfUsage)
	return cmd
}

// webViewMetrics is what gantry dev's web view serves at /metrics: the
// process's metrics, unless --metrics serves them at an address of their
// own (metricsAddr): a process serves its metrics at one endpoint, or a
// Prometheus scraping both would count every series twice.
func webViewMetrics(metricsAddr string) http.Handler {
	if metricsAddr != "" {
		return nil
	}
	return metricsserve.Metrics()
}

// DevStopWait bounds how long gantry dev takes to stop once interrupted.
var DevStopWait = 30 * time.Second

// boundStop waits for gantry dev's interrupt (ctx done while parent is
// not), says it is stopping, lets a second interrupt end the process at
// once (stop restores the signal's default), and ends it with
// ExitInterrupted if it has not stopped within wait, whatever still
// waits. It returns when stopped is closed.
func boundStop(ctx, parent context.Context, stop func(), stopped <-chan struct{}, stderr io.Writer, wait time.Duration, exit func(int)) {
	select {
	case <-stopped:
		return
	case <-ctx.Done():
	}
	if parent.Err() != nil {
		return
	}
	stop()
	fmt.Fprintf(stderr, "gantry dev: stopping: finishing the work in flight (at most %s; interrupt again to stop at once)\n", wait)
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-stopped:
	case <-t.C:
		fmt.Fprintf(stderr, "gantry dev: not stopped after %s: stopping now; commands still running on hosts finish there, and their results are read at the next start\n", wait)
		exit(ExitInterrupted)
	}
}

// devServices are the settings gantry dev runs the four services with:
// the very flags each service declares (its Config.RegisterFlags), so
// gantry dev takes every one of them; a flag two services declare (the
// executor's and health-gate's --ssh-key) sets both.
type devServices struct {
	planner    planner.Config
	executor   executor.Config
	healthGate healthgate.Config
	stateStore statestore.Config
	fs         *flag.FlagSet // flags made them
}

func (d *devServices) configs() []servicemain.Config {
	return []servicemain.Config{&d.planner, &d.executor, &d.healthGate, &d.stateStore}
}

// flags declares the services' flags in one set; --allow-local is on
// by default in dev.
func (d *devServices) flags() *flag.FlagSet {
	d.fs = servicemain.Merge("dev", servicemain.EnvOf(d.configs()...), d.configs()...)
	_ = d.fs.Set("allow-local", "true")
	d.fs.Lookup("allow-local").DefValue = "true"
	return d.fs
}

// configure sets the flags not given from their environment variables,
// then checks every service's settings.
func (d *devServices) configure(lookup servicemain.LookupEnv, given func(string) bool) error {
	if err := servicemain.EnvOf(d.configs()...).Apply(d.fs, lookup, given); err != nil {
		return err
	}
	servicemain.ReadEnv(lookup, d.configs()...)
	var errs []error
	for _, c := range d.configs() {
		errs = append(errs, c.Check())
	}
	return errors.Join(errs...)
}

// defaultDataDir is dev's data directory when --data-dir is not given.
// With no home directory it is gantry-dev-<uid> under the shared temporary
// directory, which it makes, or accepts only as this user's own (0700, not
// a symlink): the operator's key is written there.
func defaultDataDir() (string, error) {
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "gantry", "dev"), nil
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "share", "gantry", "dev"), nil
	}
	d := filepath.Join(os.TempDir(), "gantry-dev-"+uidString())
	if err := privateDir(d); err != nil {
		return "", err
	}
	return d, nil
}

// lockDataDir holds dir's lock file while gantry dev runs: two JetStream
// servers on one store would corrupt it, so a second gantry dev on the
// same --data-dir is refused, naming the directory. The lock is the
// file's flock, which the kernel drops with the process however it ends.
func lockDataDir(dir string) (unlock func(), err error) {
	f, err := os.OpenFile(filepath.Join(dir, "gantry-dev.lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, fmt.Errorf("lock the data dir %s: %w", dir, err)
	}
	switch err := unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB); {
	case errors.Is(err, unix.EWOULDBLOCK):
		f.Close()
		return nil, fmt.Errorf("another gantry dev runs on the data dir %s (give another --data-dir to run a second one)", dir)
	case err != nil:
		f.Close()
		return nil, fmt.Errorf("lock the data dir %s: %w", dir, err)
	}
	return func() { _ = f.Close() }, nil
}
