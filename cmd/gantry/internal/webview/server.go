// Package webview is gantry's web view: the list of workflows and, for
// one workflow, its live DAG, fed by server-sent events from the NATS
// streams. It only reads (GET only, no control verbs), through a Source
// that a viewer's credentials suffice for.
package webview

import (
	"cmp"
	"context"
	"embed"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

//go:embed static
var static embed.FS

// Server serves the web view.
type Server struct {
	Src Source
	Log *slog.Logger
	// Lookback is how far back the streams are read for a workflow the
	// state-store does not know yet (just accepted); 10 minutes when zero.
	Lookback time.Duration
	// Heartbeat is how often an idle event stream gets a comment, so that
	// proxies keep it open; 15s when zero.
	Heartbeat time.Duration
	// LoopbackOnly refuses requests whose Host is not localhost or a
	// loopback address: a server bound to loopback then cannot be read by
	// a web page through DNS rebinding.
	LoopbackOnly bool
	// MaxStreams bounds the pages served live at once, workflow pages
	// (each reads two streams) and list pages (one) together;
	// DefaultMaxStreams when zero. Others get 503.
	MaxStreams int
	// WriteTimeout bounds each write to a workflow page's event stream: a
	// browser that stops reading (or a client that never reads) loses its
	// stream, and its slot, once a write has waited this long;
	// DefaultWriteTimeout when zero.
	WriteTimeout time.Duration
	// Metrics, when set, is served at /metrics (the process's Prometheus
	// metrics); nil when the process serves them elsewhere (gantry dev
	// --metrics): one endpoint per process, or a Prometheus scraping both
	// would count every series twice.
	Metrics http.Handler
	// TraceURL, when set, is a trace URL template with {trace_id}
	// (CheckTraceURL): a run whose events carry a trace links to it.
	TraceURL string

	once  sync.Once
	slots chan struct{}
	// outputs bounds the full outputs read at once (MaxOutputReads).
	outputsOnce sync.Once
	outputs     chan struct{}
	// verdicts remembers what check runs found (verdictOf).
	verdicts verdictCache
}

// DefaultMaxStreams is MaxStreams when not set.
const DefaultMaxStreams = 64

// DefaultWriteTimeout is WriteTimeout when not set.
const DefaultWriteTimeout = 30 * time.Second

// csp keeps the page to its own script and styles: nothing inline,
// nothing from elsewhere.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler is the web view's HTTP handler: GET only.
func (s *Server) Handler() http.Handler {
	files, _ := fs.Sub(static, "static")
	mux := http.NewServeMux()
	page := func(w http.ResponseWriter, r *http.Request) {
		http.ServeFileFS(w, r, files, "index.html")
	}
	mux.HandleFunc("GET /{$}", page)
	mux.HandleFunc("GET /w/{id}", page)
	mux.HandleFunc("GET /w/{id}/output/{formula}/{node}", page)
	mux.HandleFunc("GET /h/{host}", page)
	mux.Handle("GET /static/", http.StripPrefix("/static/", http.FileServerFS(files)))
	mux.HandleFunc("GET /api/workflows", s.list)
	mux.HandleFunc("GET /api/workflows/events", s.listStream)
	mux.HandleFunc("GET /api/workflows/{id}/events", s.stream)
	mux.HandleFunc("GET /api/workflows/{id}/output/{formula}/{node}", s.output)
	mux.HandleFunc("GET /api/hosts/{host}", s.host)
	if s.Metrics != nil {
		mux.Handle("GET /metrics", s.Metrics)
	}
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	return secure(mux, s.LoopbackOnly)
}

// secure refuses every method but GET and HEAD (and, with loopbackOnly,
// any Host but a loopback one), and sets the headers that keep the page
// to its own content.
func secure(next http.Handler, loopbackOnly bool) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			w.Header().Set("Allow", "GET, HEAD")
			http.Error(w, "the web view only reads: GET only", http.StatusMethodNotAllowed)
			return
		}
		if loopbackOnly && !loopbackHost(r.Host) {
			http.Error(w, "this web view answers only requests for localhost or a loopback address", http.StatusMisdirectedRequest)
			return
		}
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		h.Set("X-Frame-Options", "DENY")
		next.ServeHTTP(w, r)
	})
}

// loopbackHost says whether a Host header names this machine's loopback.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.New(slog.DiscardHandler)
}

// listLimit reads ?limit=N: 100 when absent.
func listLimit(w http.ResponseWriter, r *http.Request) (int, bool) {
	v := r.URL.Query().Get("limit")
	if v == "" {
		return 100, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 1000 {
		http.Error(w, "limit: want a number from 1 to 1000", http.StatusBadRequest)
		return 0, false
	}
	return n, true
}

func (s *Server) list(w http.ResponseWriter, r *http.Request) {
	limit, ok := listLimit(w, r)
	if !ok {
		return
	}
	sums, err := s.Src.List(r.Context(), limit)
	if err != nil {
		s.log().Warn("web view: list", "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	rows, _ := s.rowsOf(r.Context(), sums)
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	_ = json.NewEncoder(w).Encode(rows)
}

// stream is a workflow's page as server-sent events: "snapshot" once the
// history is read, then "workflow", "formula", "node", "rollout" and
// "line" as they change; "problem" when the streams cannot be read;
// "missing" when there is no such workflow.
func (s *Server) stream(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if !dag.IsToken(id) {
		http.Error(w, fmt.Sprintf("workflow id %q is not a token", id), http.StatusBadRequest)
		return
	}
	fl, release, ok := s.beginStream(w)
	if !ok {
		return
	}
	defer release()
	ctx := r.Context()
	m := NewModel(id)
	m.TraceURL = s.TraceURL
	since, hosts := s.start(ctx, id, m)
	s.follow(ctx, s.newSSE(w, fl), id, since, hosts, m)
}

// beginStream takes a stream slot for w (acquire) once w can stream; it
// has answered the request when ok is false.
func (s *Server) beginStream(w http.ResponseWriter) (http.Flusher, func(), bool) {
	fl, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "streaming unsupported", http.StatusInternalServerError)
		return nil, nil, false
	}
	release, ok := s.acquire(w)
	return fl, release, ok
}

// acquire takes one of the MaxStreams slots, or answers 503.
func (s *Server) acquire(w http.ResponseWriter) (func(), bool) {
	s.once.Do(func() { s.slots = make(chan struct{}, cmp.Or(s.MaxStreams, DefaultMaxStreams)) })
	select {
	case s.slots <- struct{}{}:
	default:
		metricRefused.Inc()
		w.Header().Set("Retry-After", "10")
		http.Error(w, "too many pages open at once; try again later", http.StatusServiceUnavailable)
		return nil, false
	}
	metricStreams.Inc()
	return func() { metricStreams.Dec(); <-s.slots }, true
}

func (s *Server) newSSE(w http.ResponseWriter, fl http.Flusher) *sseWriter {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	return &sseWriter{w: w, fl: fl, rc: http.NewResponseController(w), timeout: cmp.Or(s.WriteTimeout, DefaultWriteTimeout)}
}

func (s *Server) heartbeat() time.Duration {
	if s.Heartbeat > 0 {
		return s.Heartbeat
	}
	return 15 * time.Second
}

// start seeds the model from the state-store and says from when to read
// the streams, and the workflow's hosts when the state-store knows them
// all (it has every formula once the plan's graph is in).
func (s *Server) start(ctx context.Context, id string, m *Model) (time.Time, []string) {
	lookback := s.Lookback
	if lookback <= 0 {
		lookback = 10 * time.Minute
	}
	doc, err := s.Src.Workflow(ctx, id)
	switch {
	case err == nil:
		m.Seed(doc)
		return doc.CreatedAt.Add(-time.Second), doc.Hosts()
	case errors.Is(err, ErrNotFound):
		// Just accepted, not yet seen by the state-store: its events are
		// recent. Anything older that the state-store does not know is
		// not a workflow.
		return time.Now().Add(-lookback), nil
	}
	s.log().Warn("web view: state-store", "workflow_id", id, "err", err)
	return time.Now().Add(-lookback), nil
}

func (s *Server) follow(ctx context.Context, sse *sseWriter, id string, since time.Time, hosts []string, m *Model) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	items := make(chan Item, 256)
	errc := make(chan error, 1)
	go func() { errc <- s.Src.Follow(ctx, id, since, hosts, items) }()
	tick := time.NewTicker(s.heartbeat())
	defer tick.Stop()
	caught := false
	for {
		select {
		case it := <-items:
			var p Patch
			switch {
			case it.CaughtUp:
				caught = true
				snap := m.Snapshot()
				if snap.Header.Status == "" {
					sse.send("missing", map[string]string{"workflow_id": id, "message": "no workflow " + id + " (gantry list shows them)"})
					return
				}
				if !sse.send("snapshot", snap) {
					return
				}
				continue
			case it.Event != nil:
				p = m.ApplyEvent(it.Event)
				if t := m.ApplyTrace(it.TraceID); t.Header != nil {
					p.Header = t.Header
				}
			case it.Line != nil:
				p = m.ApplyLine(it.Line)
			}
			if caught && !sse.patch(&p) {
				return
			}
		case err := <-errc:
			if ctx.Err() == nil && err != nil {
				s.log().Warn("web view: follow", "workflow_id", id, "err", err)
				sse.send("problem", map[string]string{"message": err.Error()})
			}
			return
		case <-tick.C:
			if !sse.comment() {
				return
			}
		case <-ctx.Done():
			return
		}
	}
}

// sseWriter writes server-sent events, each write bounded by timeout.
type sseWriter struct {
	w       http.ResponseWriter
	fl      http.Flusher
	rc      *http.ResponseController
	timeout time.Duration
}

// send writes one event; false when the client is gone or does not read.
func (s *sseWriter) send(event string, v any) bool {
	b, err := json.Marshal(v) // one line: newlines in strings are escaped
	if err != nil {
		return true
	}
	if !s.write(func() error { _, err := fmt.Fprintf(s.w, "event: %s\ndata: %s\n\n", event, b); return err }) {
		return false
	}
	metricMessages.Inc()
	return true
}

// retry tells the browser how long to wait before it reconnects.
func (s *sseWriter) retry(d time.Duration) bool {
	return s.write(func() error { _, err := fmt.Fprintf(s.w, "retry: %d\n\n", d.Milliseconds()); return err })
}

func (s *sseWriter) comment() bool {
	return s.write(func() error { _, err := fmt.Fprint(s.w, ": keep-alive\n\n"); return err })
}

// write writes and flushes within the timeout.
func (s *sseWriter) write(f func() error) bool {
	if s.rc != nil && s.timeout > 0 {
		_ = s.rc.SetWriteDeadline(time.Now().Add(s.timeout)) // unsupported: unbounded, as before
	}
	if err := f(); err != nil {
		return false
	}
	if s.rc != nil {
		return s.rc.Flush() == nil
	}
	s.fl.Flush()
	return true
}

// patch sends what an event changed, the workflow's header last: its
// summary counts the formulas and nodes sent before it.
func (s *sseWriter) patch(p *Patch) bool {
	ok := true
	for _, f := range p.Formulas {
		ok = ok && s.send("formula", f)
	}
	for _, n := range p.Nodes {
		ok = ok && s.send("node", n)
	}
	if p.Rollout != nil {
		ok = ok && s.send("rollout", p.Rollout)
	}
	if p.Line != nil {
		ok = ok && s.send("line", p.Line)
	}
	if p.Header != nil {
		ok = ok && s.send("workflow", p.Header)
	}
	return ok
}

// Serve serves h on ln until ctx ends.
func Serve(ctx context.Context, ln net.Listener, h http.Handler) error {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second,
		BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(sctx)
		_ = srv.Close()
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("web view: %w", err)
	}
	return nil
}
