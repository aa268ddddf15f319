package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/webview"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/spf13/cobra"
)

func newUICmd() *cobra.Command {
	var cf connFlags
	var addr, traceURL string
	cmd := &cobra.Command{
		Use:   "ui --http ADDR",
		Short: "Serve the web view: workflows and their live DAG",
		Long: `ui serves the web view on --http ADDR (e.g. 127.0.0.1:8080): the list of
workflows, and for each its DAG of formulas and nodes, coloured by state and
updated live, with every node's attempts, output and health gate. It also
serves /metrics (Prometheus: the web view's own, and gantry_build_info)
and /healthz.

It only reads, so a viewer's credentials suffice (--creds or --nkey, or the
NATS_* environment, or --context); with none, a ` + "`gantry dev`" + ` server takes it
for a viewer. The web server answers GET only, offers no control verbs, and
shows nothing its NATS identity could not read; it has no login of its own:
bind it to 127.0.0.1 unless everyone who can reach ADDR may see the runs.

--trace-url https://jaeger.example/trace/{trace_id} links each traced run to
its trace.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if addr == "" {
				return &exitError{code: ExitUsage, err: fmt.Errorf("--http ADDR is required (e.g. --http 127.0.0.1:8080)")}
			}
			if err := checkTraceURL(traceURL); err != nil {
				return err
			}
			cl, err := cf.connectAs(false)
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			log := slog.New(slog.NewJSONHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: slog.LevelWarn}))
			srv := &webview.Server{Src: &webview.NATS{Client: cl}, Log: log, TraceURL: traceURL, Metrics: uiMetrics()}
			wait, err := startWebView(ctx, cmd.OutOrStdout(), "gantry ui", addr, srv)
			if err != nil {
				return err
			}
			return wait()
		},
	}
	cf.add(cmd)
	cmd.Flags().StringVar(&addr, "http", "", "address to serve the web view on, e.g. 127.0.0.1:8080")
	traceURLFlag(cmd, &traceURL)
	return cmd
}

// traceURLFlag adds --trace-url, the link to a run's trace.
func traceURLFlag(cmd *cobra.Command, v *string) {
	cmd.Flags().StringVar(v, "trace-url", "", "link each traced run to its trace: a URL with {trace_id}, e.g. https://jaeger.example/trace/{trace_id}")
}

// checkTraceURL refuses a --trace-url that is not an http(s) URL with
// {trace_id}.
func checkTraceURL(tmpl string) error {
	if tmpl == "" {
		return nil
	}
	if err := webview.CheckTraceURL(tmpl); err != nil {
		return &exitError{code: ExitUsage, err: err}
	}
	return nil
}

// startWebView listens on addr and serves srv there until ctx ends
// (answering only loopback Hosts when addr is a loopback address); wait
// waits for that.
func startWebView(ctx context.Context, out io.Writer, who, addr string, srv *webview.Server) (wait func() error, err error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, &exitError{code: ExitProblem, err: fmt.Errorf("--http: %w", err)}
	}
	a := ln.Addr()
	ta, _ := a.(*net.TCPAddr)
	if srv.Metrics != nil {
		fmt.Fprintf(out, "%s: web view at %s (metrics at /metrics)\n", who, pasteableURL(ta, a))
	} else {
		fmt.Fprintf(out, "%s: web view at %s\n", who, pasteableURL(ta, a))
	}
	if ta != nil && !ta.IP.IsLoopback() {
		fmt.Fprintf(out, "%s: %s is reachable from other machines: anyone who can reach it sees the runs%s\n", who, a, otherMachinesURL(ta))
	}
	srv.LoopbackOnly = ta != nil && ta.IP.IsLoopback()
	done := make(chan error, 1)
	go func() { done <- webview.Serve(ctx, ln, srv.Handler()) }()
	return func() error {
		if err := <-done; err != nil {
			return &exitError{code: ExitProblem, err: err}
		}
		return nil
	}, nil
}

// pasteableURL is the web view's address as a browser takes it: one it
// listens on every interface of (0.0.0.0, ::) is reached on this machine
// at 127.0.0.1; an IPv6 address is written in brackets.
func pasteableURL(ta *net.TCPAddr, a net.Addr) string {
	if ta == nil {
		return "http://" + a.String() + "/"
	}
	host := ta.IP.String()
	if ta.IP.IsUnspecified() {
		host = "127.0.0.1"
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(ta.Port)) + "/"
}

// otherMachinesURL says how other machines reach a web view listening on
// every interface: at this host's name.
func otherMachinesURL(ta *net.TCPAddr) string {
	if !ta.IP.IsUnspecified() {
		return ""
	}
	name, err := os.Hostname()
	if err != nil || name == "" {
		return ""
	}
	return " (from another machine: http://" + net.JoinHostPort(name, strconv.Itoa(ta.Port)) + "/)"
}

// connectAs is connect; asOperator picks the key of a `gantry dev` on this
// machine when no credentials are given (else the server decides: a dev
// server takes such a client for a viewer).
func (c *connFlags) connectAs(asOperator bool) (*client.Client, error) {
	if asOperator {
		return c.connect()
	}
	o, err := c.opts.Resolved(os.Getenv)
	if err != nil {
		return nil, &exitError{code: ExitUsage, err: err}
	}
	nc, err := natsconn.Connect(o, "gantry-ui", quietLogger(), false)
	if err != nil {
		return nil, &exitError{code: ExitProblem, err: fmt.Errorf("%w (is `gantry dev` running? set --server or NATS_URL, and --creds or --nkey)", err)}
	}
	return client.New(nc, c.timeout), nil
}

// uiMetrics is what gantry ui serves at /metrics: the web view's own, the
// build's and the process's. The binary links every service's packages,
// whose metrics it does not run: served, they would read 0.
func uiMetrics() http.Handler { return metricsserve.Only(webview.Registry) }
