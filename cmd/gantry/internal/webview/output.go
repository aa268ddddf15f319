package webview

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// MaxOutputBytes bounds the full output of a node the web view sends, as
// its JSON takes it (each line's escaped text and its fields): the lines
// after it are left out, and the reply says so.
const MaxOutputBytes = 32 << 20

// MaxOutputReads bounds the full outputs read at once (each reads the
// node's lines from the log stream and holds them until it answers);
// others get 503.
const MaxOutputReads = 4

// outputLineFields is what a line's fields and punctuation take in the
// JSON reply, beside its text: {"attempt":N,"stream":"stdout","text":""},
const outputLineFields = 48

// OutputLine is one line of a node's full output (format=json).
type OutputLine struct {
	Attempt int    `json:"attempt"`
	Stream  string `json:"stream"`
	Text    string `json:"text"`
}

// OutputReply is a node's full output as JSON.
type OutputReply struct {
	WorkflowID string       `json:"workflow_id"`
	Formula    string       `json:"formula"`
	Node       string       `json:"node"`
	Host       string       `json:"host"`
	Lines      []OutputLine `json:"lines"`
	// Cut says lines were left out past MaxOutputBytes.
	Cut bool `json:"cut,omitempty"`
}

// errCut stops reading once MaxOutputBytes are read.
var errCut = errors.New("output cut")

// output is one node's full output, as the log stream holds it (lines
// older than the stream keeps are gone): text/plain by default, each
// line as the executor published it (secrets already masked), a line
// "==> attempt N <==" before each attempt's when there are several;
// ?download=1 makes it an attachment; ?format=json gives OutputReply.
// ?attempt=N keeps one attempt's lines. Output is never HTML.
func (s *Server) output(w http.ResponseWriter, r *http.Request) {
	opts, err := outputOptionsOf(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	q, ok := s.outputQuery(w, r)
	if !ok {
		return
	}
	s.outputsOnce.Do(func() { s.outputs = make(chan struct{}, MaxOutputReads) })
	select {
	case s.outputs <- struct{}{}:
		defer func() { <-s.outputs }()
	default:
		w.Header().Set("Retry-After", "5")
		http.Error(w, "too many outputs read at once; try again later", http.StatusServiceUnavailable)
		return
	}
	reply := OutputReply{WorkflowID: q.WorkflowID, Formula: q.Formula, Node: q.Node, Host: q.Host, Lines: []OutputLine{}}
	size := 0
	err = s.Src.Output(r.Context(), q, func(l *events.LogLine) error {
		if opts.attempt > 0 && l.Attempt != opts.attempt {
			return nil
		}
		if size += jsonTextLen(l.Line) + outputLineFields; size > MaxOutputBytes {
			return errCut
		}
		reply.Lines = append(reply.Lines, OutputLine{Attempt: l.Attempt, Stream: string(l.Stream), Text: l.Line})
		return nil
	})
	reply.Cut = errors.Is(err, errCut)
	if err != nil && !reply.Cut {
		s.log().Warn("web view: output", "workflow_id", q.WorkflowID, "host", q.Host, "node", q.Formula+"/"+q.Node, "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return
	}
	h := w.Header()
	h.Set("Cache-Control", "no-store")
	if opts.json {
		h.Set("Content-Type", "application/json")
		enc := json.NewEncoder(w)
		enc.SetEscapeHTML(false) // never read as HTML: application/json, nosniff
		_ = enc.Encode(reply)
		return
	}
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if opts.download {
		h.Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", outputFileName(q, opts.attempt)))
	}
	writeText(w, &reply)
}

// jsonTextLen is what s takes as a JSON string's content, as encoding/json
// writes it without HTML escapes: a quote, a backslash and \n \r \t
// take 2 bytes, other control characters, U+2028, U+2029 and each byte
// of invalid UTF-8 6.
func jsonTextLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1, r == '\u2028', r == '\u2029':
			n += 6
		case r == '"', r == '\\', r == '\n', r == '\r', r == '\t':
			n += 2
		case r < 0x20:
			n += 6
		default:
			n += size
		}
		i += size
	}
	return n
}

// outputOptions are the query's: ?attempt=N, ?format=text|json,
// ?download=1.
type outputOptions struct {
	attempt        int
	json, download bool
}

func outputOptionsOf(r *http.Request) (outputOptions, error) {
	var o outputOptions
	v := r.URL.Query()
	if a := v.Get("attempt"); a != "" {
		n, err := strconv.Atoi(a)
		if err != nil || n < 1 {
			return o, fmt.Errorf("attempt %q: want a number from 1", a)
		}
		o.attempt = n
	}
	switch f := v.Get("format"); f {
	case "", "text":
	case "json":
		o.json = true
	default:
		return o, fmt.Errorf("format %q: want text or json", f)
	}
	switch d := v.Get("download"); d {
	case "", "0":
	case "1":
		o.download = true
	default:
		return o, fmt.Errorf("download %q: want 1 or 0", d)
	}
	return o, nil
}

// outputQuery reads the node from the path and finds its host and the
// workflow's start in the state-store; it has answered when ok is false.
func (s *Server) outputQuery(w http.ResponseWriter, r *http.Request) (OutputQuery, bool) {
	q := OutputQuery{WorkflowID: r.PathValue("id"), Formula: r.PathValue("formula"), Node: r.PathValue("node")}
	for _, p := range []struct{ what, v string }{{"workflow id", q.WorkflowID}, {"formula", q.Formula}, {"node", q.Node}} {
		if !dag.IsToken(p.v) {
			http.Error(w, fmt.Sprintf("%s %q is not a token", p.what, p.v), http.StatusBadRequest)
			return q, false
		}
	}
	doc, err := s.Src.Workflow(r.Context(), q.WorkflowID)
	switch {
	case errors.Is(err, ErrNotFound):
		http.Error(w, "no workflow "+q.WorkflowID, http.StatusNotFound)
		return q, false
	case err != nil:
		s.log().Warn("web view: output", "workflow_id", q.WorkflowID, "err", err)
		http.Error(w, err.Error(), http.StatusBadGateway)
		return q, false
	}
	f := doc.Formulas[q.Formula]
	if f == nil || f.Host == "" {
		http.Error(w, fmt.Sprintf("workflow %s has no formula %s", q.WorkflowID, q.Formula), http.StatusNotFound)
		return q, false
	}
	if _, ok := f.Nodes[q.Node]; !ok {
		http.Error(w, fmt.Sprintf("formula %s of workflow %s has no node %s (or it has not started yet)", q.Formula, q.WorkflowID, q.Node), http.StatusNotFound)
		return q, false
	}
	q.Host, q.Since = f.Host, doc.CreatedAt.Add(-time.Second)
	return q, true
}

// writeText writes the lines as text, a header before each attempt's
// when there are several.
func writeText(w http.ResponseWriter, reply *OutputReply) {
	several := false
	for _, l := range reply.Lines {
		several = several || l.Attempt != reply.Lines[0].Attempt
	}
	prev := 0
	for _, l := range reply.Lines {
		if several && l.Attempt != prev {
			fmt.Fprintf(w, "==> attempt %d <==\n", l.Attempt)
			prev = l.Attempt
		}
		fmt.Fprintln(w, l.Text)
	}
	if reply.Cut {
		fmt.Fprintf(w, "==> cut: the output goes on past %d MiB <==\n", MaxOutputBytes>>20)
	}
}

// outputFileName is the download's name: <workflow id>-<formula>-<node>.log.
func outputFileName(q OutputQuery, attempt int) string {
	name := q.WorkflowID + "-" + q.Formula + "-" + q.Node
	if attempt > 0 {
		name += "-attempt" + strconv.Itoa(attempt)
	}
	return name + ".log"
}
