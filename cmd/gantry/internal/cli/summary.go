package cli

import (
	"fmt"
	"io"
	"os"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// summary counts a workflow's nodes by state as watch reads its events:
// of the newest run (generation) only. A node's transition counts only
// when it is ahead of the node's last one (dag.CompareNode): a running
// stored again after the node succeeded changes nothing.
type summary struct {
	total int
	gen   int
	nodes map[string]dag.NodeMark // formula/node
	// seen holds the ids of the events taken in: one stored twice is
	// taken once.
	seen map[string]bool
}

// observe takes an event in; repeat says it was taken in already (the
// same event stored again), and changes nothing.
func (s *summary) observe(env *events.Envelope) (repeat bool) {
	if s.seen[env.ID] {
		return true
	}
	if s.seen == nil {
		s.seen = map[string]bool{}
	}
	s.seen[env.ID] = true
	switch env.Type.Family() {
	case events.FamilyWorkflow:
		var e events.WorkflowEvent
		if events.DecodeData(env, &e) == nil {
			s.total = max(s.total, e.TotalNodes)
			s.generation(e.Generation)
		}
	case events.FamilyNode:
		var e events.NodeEvent
		if events.DecodeData(env, &e) != nil || e.Generation < s.gen {
			return false
		}
		s.generation(e.Generation)
		if s.nodes == nil {
			s.nodes = map[string]dag.NodeMark{}
		}
		k := e.Formula + "/" + e.Node
		if next := e.Mark(); dag.CompareNode(s.nodes[k], next).Moves() {
			s.nodes[k] = next
		}
	}
	return false
}

// generation starts counting again for a newer run.
func (s *summary) generation(g int) {
	if g > s.gen {
		s.gen, s.nodes = g, nil
	}
}

// String is "3/10 nodes done, 2 running, 1 failed" (done: ended one way
// or another; without the plan's size, "3 nodes done, ...").
func (s *summary) String() string {
	var done, running, failed int
	for _, m := range s.nodes {
		st := m.State
		if m.WillRetry { // failed, but the node is still at work
			st = dag.NodeRunning
		}
		switch {
		case st == dag.NodeRunning:
			running++
		case st.Terminal():
			done++
		}
		if st == dag.NodeFailed {
			failed++
		}
	}
	of := ""
	if s.total > 0 {
		of = fmt.Sprintf("/%d", s.total)
	}
	return fmt.Sprintf("%d%s nodes done, %d running, %d failed", done, of, running, failed)
}

// statusLine shows the summary. On a terminal it is one line kept under
// the events, rewritten in place; elsewhere (CI logs, a pipe) it is
// printed as a line of its own when it has changed, at most every
// interval, and at the end.
type statusLine struct {
	w        io.Writer
	tty      bool
	interval time.Duration
	shown    bool   // tty: the status is on the current line
	last     string // not a tty: the last printed
	lastAt   time.Time
}

// statusPrefix starts the summary line.
const statusPrefix = "-- "

// summaryInterval is how often a changed summary is printed when not on a
// terminal.
const summaryInterval = 10 * time.Second

func newStatusLine(w io.Writer) *statusLine {
	return &statusLine{w: w, tty: isTerminal(w), interval: summaryInterval}
}

// isTerminal says whether w is a terminal (a character device).
var isTerminal = func(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// clear takes the status off the screen before an event line.
func (l *statusLine) clear() {
	if l.tty && l.shown {
		fmt.Fprint(l.w, "\r\033[K")
		l.shown = false
	}
}

// show puts the status up (a terminal) or prints it when due.
func (l *statusLine) show(text string, now time.Time) {
	if l.tty {
		l.clear()
		fmt.Fprint(l.w, statusPrefix+text)
		l.shown = true
		return
	}
	if text != l.last && now.Sub(l.lastAt) >= l.interval {
		l.print(text, now)
	}
}

// end prints the last status as a line of its own, unless it is the one
// printed last.
func (l *statusLine) end(text string, now time.Time) {
	l.clear()
	if l.tty || text != l.last {
		l.print(text, now)
	}
}

func (l *statusLine) print(text string, now time.Time) {
	fmt.Fprintln(l.w, statusPrefix+text)
	l.last, l.lastAt = text, now
}
