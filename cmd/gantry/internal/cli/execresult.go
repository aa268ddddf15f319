package cli

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/termsafe"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// hostResult is what one host's command did: a host of gantry exec -o json.
type hostResult struct {
	Host     string       `json:"host"`
	Status   string       `json:"status"` // succeeded, failed, cancelled, skipped, blocked, or not_run
	ExitCode *int         `json:"exit_code"`
	Duration float64      `json:"duration"` // seconds
	Error    string       `json:"error,omitempty"`
	Stdout   string       `json:"stdout"`
	Stderr   string       `json:"stderr"`
	Output   []outputLine `json:"output"`
	// LeftOut counts the lines past what gantry exec keeps of a host.
	LeftOut int `json:"lines_left_out,omitempty"`
	// Incomplete says lines of its output may be missing here: its end
	// came, its last lines had not, and none came for execLogGrace
	// (gantry logs has them all).
	Incomplete bool `json:"output_incomplete,omitempty"`

	formula          string
	attempt          int
	started, endedAt time.Time // as the events say, else as they came
	seenEnd          time.Time // when its end came
	tails            [2]string // stdout and stderr tails of its end
	printed          bool
}

// outputLine is one line a command printed.
type outputLine struct {
	Stream string `json:"stream"` // stdout or stderr
	Line   string `json:"line"`
	seq    int64
}

// Host statuses beyond the node's.
const execNotRun = "not_run"

// execFollow follows an exec's workflow: each host's end from the event
// stream, its output lines from the log stream.
type execFollow struct {
	ex          *execRun
	id          string
	out         io.Writer
	format      string // "text", json or yaml
	book        *logBook
	seen        map[string]bool        // event ids taken in
	byHost      map[string]*hostResult // hosts whose node has started or ended
	order       []*hostResult          // in the order they ended
	ended       bool                   // the workflow has ended
	state       dag.WorkflowState
	reason      string
	interrupted bool
	// warn is where what holds hosts back is said (stderr), once each
	// reason (warned).
	warn   io.Writer
	warned map[string]bool
}

func newExecFollow(ex *execRun, id string, out, warn io.Writer, format string) *execFollow {
	return &execFollow{ex: ex, id: id, out: out, warn: warn, format: format, book: newLogBook(id, ex.byID),
		seen: map[string]bool{}, byHost: map[string]*hostResult{}, warned: map[string]bool{}}
}

// take takes an event in: a node's start or end, the workflow's end.
func (f *execFollow) take(env *events.Envelope, now time.Time) {
	if f.seen[env.SeenKey()] {
		return
	}
	f.seen[env.SeenKey()] = true
	pl, _ := env.Payload() // nil, and left out, when it does not decode
	switch e := pl.(type) {
	case *events.NodeEvent:
		f.node(e, env.Time, now)
	case *events.FormulaEvent:
		f.held(e)
	case *events.WorkflowEvent:
		if e.Status.Terminal() {
			f.ended, f.state, f.reason = true, e.Status, e.Reason
			f.notRun(now, fmt.Sprintf("the workflow ended (%s) before it ran", f.state))
		}
	}
}

// held says, once a reason, why a host's command has not started: its
// formula is ready and the planner reports its work unclaimed (no
// executor takes it).
func (f *execFollow) held(e *events.FormulaEvent) {
	host, ok := f.ex.byID[e.Formula]
	if !ok || e.Status != dag.FormulaReady || e.Error == "" || f.warned[e.Error] {
		return
	}
	f.warned[e.Error] = true
	linef(f.warn, "gantry: %s (and any other host held back so) waits: %s; gantry status %s", host, e.Error, f.id)
}

// node takes a node event of one of the exec's hosts in.
func (f *execFollow) node(e *events.NodeEvent, at, now time.Time) {
	host, ok := f.ex.byID[e.Formula]
	if !ok || e.Node != execNode {
		return
	}
	r := f.byHost[host]
	if r == nil {
		r = &hostResult{Host: host, formula: e.Formula}
		f.byHost[host] = r
	}
	if !r.seenEnd.IsZero() {
		return // ended already
	}
	if e.Status == dag.NodeRunning && r.started.IsZero() {
		r.started = at
	}
	if !e.Status.Terminal() || e.WillRetry {
		return
	}
	r.Status, r.ExitCode, r.Error, r.attempt = string(e.Status), e.ExitCode, e.Error, e.Attempt
	if e.Error == "" && e.Reason != "" && e.Status != dag.NodeSucceeded {
		r.Error = e.Reason
	}
	r.started, r.endedAt = timeOr(e.StartedAt, r.started), timeOr(e.EndedAt, at)
	if !r.started.IsZero() {
		r.Duration = r.endedAt.Sub(r.started).Seconds()
	}
	r.tails, r.seenEnd = [2]string{e.StdoutTail, e.StderrTail}, now
	f.order = append(f.order, r)
}

func timeOr(t *time.Time, or time.Time) time.Time {
	if t != nil && !t.IsZero() {
		return *t
	}
	return or
}

// notRun ends the hosts whose node never ended: the workflow ended
// without running them (cancelled before they started), or gantry
// stopped waiting for it (why says which).
func (f *execFollow) notRun(now time.Time, why string) {
	for _, h := range f.ex.hosts {
		r := f.byHost[h]
		if r != nil && !r.seenEnd.IsZero() {
			continue
		}
		if r == nil {
			r = &hostResult{Host: h}
			f.byHost[h] = r
		}
		r.Status, r.Error = execNotRun, why
		r.seenEnd = now.Add(-execLogGrace)
		f.order = append(f.order, r)
	}
}

// flush prints the hosts whose command has ended and whose output is all
// in (or has had execLogGrace to come), in the order they ended, and says
// whether every ended host is printed.
func (f *execFollow) flush(now time.Time) bool {
	all := true
	for _, r := range f.order {
		if r.printed {
			continue
		}
		k := logKey{r.formula, r.attempt}
		in := r.outputIn(f.book, k)
		if !in && now.Sub(later(r.seenEnd, f.book.lastLine(k))) < execLogGrace {
			all = false // lines may still come: they came within the grace
			continue
		}
		f.settle(r, k)
		r.Incomplete = !in && r.ExitCode != nil && r.LeftOut == 0
		if !structured(f.format) {
			printHost(f.out, r, f.id)
		}
	}
	return all
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// outputIn says whether the host's output lines are all in: they end as
// its end's output tails do. Without a result (exit code) there are no
// tails to tell: the lines get execLogGrace to come.
func (r *hostResult) outputIn(book *logBook, k logKey) bool {
	return r.ExitCode != nil && book.complete(k, r.tails)
}

// flushAll prints every ended host that is not yet printed.
func (f *execFollow) flushAll() { f.flush(time.Now().Add(execLogGrace)) }

// settle takes a host's output lines from the book (its end's tails when
// none came) and marks it printed.
func (f *execFollow) settle(r *hostResult, k logKey) {
	r.printed = true
	r.Output, r.LeftOut = f.book.take(k)
	if len(r.Output) == 0 {
		r.Output = tailOutput(r.tails)
	}
	var out, errs []string
	for _, l := range r.Output {
		if l.Stream == string(events.Stderr) {
			errs = append(errs, l.Line)
		} else {
			out = append(out, l.Line)
		}
	}
	r.Stdout, r.Stderr = joinLines(out), joinLines(errs)
	if r.Output == nil {
		r.Output = []outputLine{}
	}
}

func joinLines(lines []string) string {
	if len(lines) == 0 {
		return ""
	}
	return strings.Join(lines, "\n") + "\n"
}

// tailOutput is the output a node's end carries (its last 4 KiB of each
// stream), for a host none of whose lines came.
func tailOutput(tails [2]string) []outputLine {
	var out []outputLine
	for i, stream := range []events.Stream{events.Stdout, events.Stderr} {
		for _, l := range tailLines(tails[i]) {
			out = append(out, outputLine{Stream: string(stream), Line: l})
		}
	}
	return out
}

// printHost prints a host's header and output lines (control characters
// shown escaped: a host's output cannot drive the terminal).
func printHost(w io.Writer, r *hostResult, id string) {
	linef(w, "== %s (%s) ==", r.Host, r.headline())
	for _, l := range r.Output {
		fmt.Fprintln(w, termsafe.Line(l.Line))
	}
	if r.Incomplete {
		linef(w, "... its last lines had not come when gantry stopped waiting for them: gantry logs %s %s/%s", id, r.formula, execNode)
	}
	if r.LeftOut > 0 {
		linef(w, "... %d more line(s) left out: gantry logs %s %s/%s", r.LeftOut, id, r.formula, execNode)
	}
	ran := r.Status == string(dag.NodeSucceeded) || r.Status == string(dag.NodeFailed)
	if r.Error != "" && (r.ExitCode == nil || !ran) {
		linef(w, "gantry: %s", r.Error)
	}
}

// headline is what a host's header says: "exit 0, 1.2s", "failed, 0.31s",
// "cancelled, 2.0s", "not run".
func (r *hostResult) headline() string {
	if r.Status == execNotRun {
		return "not run"
	}
	what := r.Status
	if r.ExitCode != nil && (r.Status == string(dag.NodeSucceeded) || r.Status == string(dag.NodeFailed)) {
		what = fmt.Sprintf("exit %d", *r.ExitCode)
	}
	return what + ", " + seconds(r.Duration)
}

// seconds is "1.2s", or "0.04s" under a second.
func seconds(s float64) string {
	if s < 1 {
		return fmt.Sprintf("%.2fs", s)
	}
	return fmt.Sprintf("%.1fs", s)
}

// execCounts counts the hosts by how they ended.
type execCounts struct{ hosts, ok, failed, cancelled, notRun int }

func (f *execFollow) counts() execCounts {
	c := execCounts{hosts: len(f.ex.hosts)}
	for _, r := range f.order {
		switch r.Status {
		case string(dag.NodeSucceeded), string(dag.NodeSkipped):
			c.ok++
		case string(dag.NodeCancelled):
			c.cancelled++
		case execNotRun:
			c.notRun++
		default:
			c.failed++
		}
	}
	return c
}

// String is "5 hosts: 4 ok, 1 failed" (and how many were cancelled or
// not run, when any).
func (c execCounts) String() string {
	s := fmt.Sprintf("%d host%s: %d ok, %d failed", c.hosts, plural(c.hosts), c.ok, c.failed)
	if c.cancelled > 0 {
		s += fmt.Sprintf(", %d cancelled", c.cancelled)
	}
	if c.notRun > 0 {
		s += fmt.Sprintf(", %d not run", c.notRun)
	}
	return s
}

func plural(n int) string {
	if n == 1 {
		return ""
	}
	return "s"
}

// execReport is gantry exec -o json's document.
type execReport struct {
	WorkflowID string            `json:"workflow_id"`
	Workflow   string            `json:"workflow"`
	Command    string            `json:"command"`
	Status     dag.WorkflowState `json:"status"` // the workflow's, "" when it has not ended
	Reason     string            `json:"reason,omitempty"`
	Hosts      []*hostResult     `json:"hosts"` // in the order they ended
	Summary    execSummary       `json:"summary"`
}

type execSummary struct {
	Hosts     int `json:"hosts"`
	OK        int `json:"ok"`
	Failed    int `json:"failed"`
	Cancelled int `json:"cancelled"`
	NotRun    int `json:"not_run"`
}

// report prints the summary line, or the JSON document.
func (f *execFollow) report() error {
	c := f.counts()
	if !structured(f.format) {
		_, err := fmt.Fprintln(f.out, c.String())
		return err
	}
	hosts := make([]*hostResult, 0, len(f.order))
	for _, r := range f.order {
		if r.printed {
			hosts = append(hosts, r)
		}
	}
	return printAs(f.out, f.format, execReport{WorkflowID: f.id, Workflow: f.ex.name, Command: f.ex.command, Status: f.state, Reason: f.reason, Hosts: hosts,
		Summary: execSummary{Hosts: c.hosts, OK: c.ok, Failed: c.failed, Cancelled: c.cancelled, NotRun: c.notRun}})
}
