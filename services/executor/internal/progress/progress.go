// Package progress reads how far a running node has got from its output:
// a stdout line "PROGRESS: n", n a whole percent from 0 to 100. It decides
// which of those lines become progress events: only a changed percent, at
// most one per MinGap a node.
package progress

import (
	"strconv"
	"strings"
	"time"
)

// Prefix starts a progress line.
const Prefix = "PROGRESS:"

// MinGap is the shortest time between two progress events of a node.
const MinGap = 250 * time.Millisecond

// Parse reads a progress line: "PROGRESS: n" with n a whole number from 0
// to 100, spaces allowed around the line and after the colon. Anything
// else (another line, "PROGRESS: 150", "PROGRESS: abc", "PROGRESS: 4.5")
// is not one: it stays plain output.
func Parse(line string) (int, bool) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(line), Prefix)
	if !ok {
		return 0, false
	}
	rest = strings.TrimSpace(rest)
	if rest == "" || len(rest) > 3 {
		return 0, false
	}
	for _, c := range rest {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.Atoi(rest)
	if err != nil || n > 100 {
		return 0, false
	}
	return n, true
}

// Throttle decides which percents of one node attempt are published: one
// that differs from the last published, and no sooner than Gap after it.
// A percent that comes too soon is held, and is due once the gap has
// passed (a later one replaces it). The zero Throttle publishes the first
// percent at once and uses MinGap. It is not safe for concurrent use.
type Throttle struct {
	Gap       time.Duration
	published bool
	last      int
	at        time.Time
	held      bool
	pending   int
}

func (t *Throttle) gap() time.Duration {
	if t.Gap <= 0 {
		return MinGap
	}
	return t.Gap
}

// Offer takes percent p, seen at now. publish says to publish it now;
// otherwise wait, when above zero, is how long until the held percent is
// due (Due).
func (t *Throttle) Offer(p int, now time.Time) (publish bool, wait time.Duration) {
	if t.published && p == t.last {
		t.held = false // back where it was: nothing to say
		return false, 0
	}
	if !t.published || now.Sub(t.at) >= t.gap() {
		t.mark(p, now)
		return true, 0
	}
	t.held, t.pending = true, p
	return false, t.gap() - now.Sub(t.at)
}

// Due returns the held percent once its gap has passed, and marks it
// published; wait is how long until it is due when it is not yet.
func (t *Throttle) Due(now time.Time) (p int, ok bool, wait time.Duration) {
	if !t.held {
		return 0, false, 0
	}
	if w := t.gap() - now.Sub(t.at); w > 0 {
		return 0, false, w
	}
	p = t.pending
	t.mark(p, now)
	return p, true, 0
}

// Flush returns the held percent whatever the time, and marks it
// published: the attempt has ended and its last word is due.
func (t *Throttle) Flush(now time.Time) (int, bool) {
	if !t.held {
		return 0, false
	}
	p := t.pending
	t.mark(p, now)
	return p, true
}

func (t *Throttle) mark(p int, now time.Time) {
	t.published, t.last, t.at, t.held = true, p, now, false
}
