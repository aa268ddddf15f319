package cli

import (
	"context"
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
	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	planner "github.com/gantry-dev/gantry/services/planner/service"
	"github.com/spf13/cobra"
)

func newDevCmd() *cobra.Command {
	var port int
	var dataDir, logLevel string
	var syncAlways bool
	var ssh hostexec.SSHConfig
	var secretsDir, filesDir string
	var perHost, maxFormulas int
	var cancelWait, unclaimedAfter time.Duration
	var httpAddr, traceURL string
	var metrics string
	allowLocal := true
	retention := planner.Retention{Age: planner.DefaultRetentionAge, Keep: planner.DefaultRetentionKeep}
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
the files nodes place as source, from --files-dir.`,
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
			if perHost < 1 {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--per-host %d: at least 1 node at once on a host", perHost)}
			}
			if cancelWait <= 0 {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--cancel-wait %s: a positive duration", cancelWait)}
			}
			if unclaimedAfter <= 0 {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--unclaimed-after %s: a positive duration", unclaimedAfter)}
			}
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: lvl}))
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
			tracers, flush, err := devstack.EnvTracers(ctx)
			if err != nil {
				return &exitError{code: ExitProblem, err: fmt.Errorf("trace export: %w", err)}
			}
			defer flush()
			if err := devstack.Run(ctx, devstack.Config{Conn: natsconn.Options{URL: ns.URL()}, Keys: keys, SSH: ssh,
				AllowLocal: allowLocal, SecretsDir: secretsDir, FilesDir: filesDir, PerHost: perHost, MaxFormulas: maxFormulas, CancelWait: cancelWait, UnclaimedAfter: unclaimedAfter, Log: log, Tracer: tracers, Retention: retention}); err != nil {
				return &exitError{code: ExitProblem, err: err}
			}
			return nil
		},
	}
	cmd.Flags().IntVar(&port, "port", 4222, "NATS client port (0 picks a free one)")
	cmd.Flags().StringVar(&dataDir, "data-dir", "", "where JetStream stores data (default $XDG_DATA_HOME/gantry/dev, else ~/.local/share/gantry/dev)")
	cmd.Flags().StringVar(&logLevel, "log-level", "info", "debug, info, warn or error")
	cmd.Flags().BoolVar(&syncAlways, "sync-always", false, "fsync every JetStream write (survives power loss; slower)")
	addSSHFlags(cmd, &ssh)
	rfs := flag.NewFlagSet("retention", flag.ContinueOnError)
	planner.RegisterRetentionFlags(rfs, &retention)
	cmd.Flags().AddGoFlagSet(rfs)
	cmd.Flags().IntVar(&maxFormulas, "max-formulas", 64, "formulas the executor runs at once")
	cmd.Flags().IntVar(&perHost, "per-host", 8, "nodes running at once on a host without max_parallel, across all executors")
	cmd.Flags().DurationVar(&cancelWait, "cancel-wait", planner.DefaultCancelWait, "how long a cancelled workflow waits for the outcomes of its running formulas before it ends cancelled without them")
	cmd.Flags().DurationVar(&unclaimedAfter, "unclaimed-after", planner.DefaultUnclaimedAfter, "how long a formula's dispatch may wait with no executor taking it before the planner reports it, naming the zone")
	cmd.Flags().BoolVar(&allowLocal, "allow-local", true, "run the commands of hosts with transport local (as this process's user, on this machine)")
	cmd.Flags().StringVar(&httpAddr, "http", "", "also serve the web view (and /metrics, unless --metrics is given) on this address, e.g. 127.0.0.1:8080, reading as the viewer")
	traceURLFlag(cmd, &traceURL)
	cmd.Flags().StringVar(&metrics, "metrics", os.Getenv(metricsserve.Env), "serve the Prometheus metrics of every service at http://ADDR/metrics, e.g. 127.0.0.1:9464, and not on the web view's address (default $"+metricsserve.Env+", else off)")
	cmd.Flags().StringVar(&secretsDir, "secrets-dir", os.Getenv("GANTRY_SECRETS_DIR"), "directory with one file per secret that commands name as {secret: NAME} (default $GANTRY_SECRETS_DIR)")
	cmd.Flags().StringVar(&filesDir, "files-dir", os.Getenv("GANTRY_FILES_DIR"), "directory holding the files nodes place with files: [{source: NAME}] (default $GANTRY_FILES_DIR)")
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

// addSSHFlags adds the SSH settings of the executor and health-gate: the
// very flags the services declare (hostexec.SSHConfig.RegisterFlags), so
// gantry dev takes every one of them.
func addSSHFlags(cmd *cobra.Command, c *hostexec.SSHConfig) {
	fs := flag.NewFlagSet("ssh", flag.ContinueOnError)
	c.RegisterFlags(fs)
	cmd.Flags().AddGoFlagSet(fs)
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
