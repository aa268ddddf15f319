package cli

import (
	"fmt"
	"io"
	"os"
	"time"
)

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

// due says whether show would print now: on a terminal always, else
// once the interval has passed (the summary need not be made before).
func (l *statusLine) due(now time.Time) bool {
	return l.tty || now.Sub(l.lastAt) >= l.interval
}

// end prints the last status as a line of its own, unless it is the one
// printed last.
func (l *statusLine) end(text string, now time.Time) {
	l.clear()
	if l.tty || text != l.last {
		l.print(text, now)
	}
}

// note prints a line of its own after the summary (what failed, at the
// end of a run).
func (l *statusLine) note(text string) {
	l.clear()
	fmt.Fprintln(l.w, statusPrefix+text)
}

func (l *statusLine) print(text string, now time.Time) {
	fmt.Fprintln(l.w, statusPrefix+text)
	l.last, l.lastAt = text, now
}
