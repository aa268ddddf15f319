package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
)

// GateNode is what gantry logs calls a formula's health gate: FORMULA/gate
// prints what its checks printed, each check as an attempt (#n).
const GateNode = "gate"

// A health gate's checks are not a node's: what each printed is in its
// health event (the last events.MaxTailBytes of its output), on the event
// stream. gantry logs reads them there and prints them among the nodes'
// lines, in time order: each line of a check's output, then its result.

// gateLine is a line of a check's output, or its result.
type gateLine struct {
	at time.Time
	ll events.LogLine
}

// Streams of gate lines: what the check printed, and how it ended.
const (
	gateOutput events.Stream = "output"
	gateResult events.Stream = "result"
)

// checkLogLines are a check's lines: its output, then its result ("fail:
// exit 2", "pass").
func checkLogLines(at time.Time, e *events.HealthEvent) []gateLine {
	ref := e.Ref
	ref.Node = GateNode
	var out []gateLine
	add := func(s events.Stream, line string) {
		out = append(out, gateLine{at: at, ll: events.LogLine{Ref: ref, Attempt: e.Attempt, Stream: s, Seq: int64(len(out) + 1), Line: line}})
	}
	if tail := strings.TrimRight(e.OutputTail, "\n"); tail != "" {
		for _, l := range strings.Split(tail, "\n") {
			add(gateOutput, strings.TrimSuffix(l, "\r"))
		}
	}
	result := string(e.Status)
	switch {
	case e.Status == events.HealthFail && e.ExitCode != nil:
		result += fmt.Sprintf(": exit %d", *e.ExitCode)
	case e.Status == events.HealthFail && e.Error != "":
		result += ": " + firstLine(e.Error)
	}
	if e.Final && e.Status == events.HealthFail {
		result += "; " + e.GateFailure()
	}
	add(gateResult, result)
	return out
}

// gateFeed reads a workflow's health events from the event stream and
// hands over the lines of those gantry logs shows.
type gateFeed struct {
	feed    *client.Feed // nil: no gate is shown
	q       logsQuery
	pending []gateLine // read, not printed yet
	fetched time.Time
}

// wantsGates says whether what logs prints takes in health gates: every
// node's lines, a host's, or FORMULA/gate.
func (q logsQuery) wantsGates() bool {
	return q.sel.all() || q.sel.host != "" || q.sel.node == GateNode || (q.sel.formula != "" && q.sel.node == "")
}

// healthSubjects are the health subjects to read: the host's, the
// formula's host's when known, else every host's.
func (q logsQuery) healthSubjects() string {
	switch {
	case q.sel.host != "":
		return events.HostHealth(q.sel.host)
	case q.sel.formula != "" && q.doc != nil && q.doc.Formulas[q.sel.formula] != nil && q.doc.Formulas[q.sel.formula].Host != "":
		return events.HostHealth(q.doc.Formulas[q.sel.formula].Host)
	}
	return events.AllHealth
}

func openGateFeed(ctx context.Context, cl *client.Client, q logsQuery) (*gateFeed, error) {
	g := &gateFeed{q: q}
	if !q.wantsGates() {
		return g, nil
	}
	feed, err := cl.Follow(ctx, client.FollowOptions{Stream: events.StreamEvents, Subjects: []string{q.healthSubjects()}, Since: q.since})
	if err != nil {
		return nil, err
	}
	g.feed = feed
	return g, g.fetch(ctx)
}

// fetch reads what the stream holds now.
func (g *gateFeed) fetch(ctx context.Context) error {
	if g.feed == nil {
		return nil
	}
	g.fetched = time.Now()
	for m, err := range g.feed.Drain(ctx) {
		if err != nil {
			return err
		}
		var e events.HealthEvent
		if events.DecodeData(m.Envelope, &e) != nil || e.WorkflowID != g.q.id || !g.match(&e) {
			continue
		}
		g.pending = append(g.pending, checkLogLines(m.Envelope.Time, &e)...)
	}
	return nil
}

func (g *gateFeed) match(e *events.HealthEvent) bool {
	switch s := g.q.sel; {
	case s.host != "":
		return e.Host == s.host
	case s.formula != "":
		return e.Formula == s.formula
	}
	return true
}

// due says whether it is time to read the stream again (following).
func (g *gateFeed) due() bool { return g.feed != nil && time.Since(g.fetched) >= logsPoll }

// print prints the lines read up to t (all of them when t is zero).
func (g *gateFeed) print(w io.Writer, t time.Time, format string) error {
	n := 0
	for _, l := range g.pending {
		if !t.IsZero() && l.at.After(t) {
			break
		}
		env := &events.Envelope{Time: l.at}
		if err := printLogLine(w, env, &l.ll, format); err != nil {
			return err
		}
		n++
	}
	g.pending = g.pending[n:]
	return nil
}
