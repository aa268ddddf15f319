package cli

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
)

// maxHostOutput bounds the output gantry exec keeps of one host until it
// prints it: the lines past it are counted, not kept (gantry logs has
// them).
const maxHostOutput = 1 << 20

// logKey is one attempt of one instance's node.
type logKey struct {
	formula string
	attempt int
}

// logBook collects the output lines of an exec's nodes from the log
// stream, per attempt, until each is printed.
type logBook struct {
	id   string
	ours map[string]string // the exec's instances
	mu   sync.Mutex
	keys map[logKey]*hostLines
}

type hostLines struct {
	lines   []outputLine
	bytes   int
	leftOut int
	last    time.Time // when its last line came
}

func newLogBook(id string, ours map[string]string) *logBook {
	return &logBook{id: id, ours: ours, keys: map[logKey]*hostLines{}}
}

// start reads the log stream from since, on the exec's node's subjects,
// until ctx ends.
func (b *logBook) start(ctx context.Context, cl *client.Client, since time.Time) error {
	feed, err := cl.Follow(ctx, client.FollowOptions{Stream: events.StreamLogs, Subjects: []string{events.HostLogs("*", execNode)}, Since: since})
	if err != nil {
		return &exitError{code: ExitProblem, err: fmt.Errorf("exec: output lines: %w", err)}
	}
	go func() {
		for m, err := range feed.Messages() {
			var ll events.LogLine
			if err == nil && events.DecodeData(m.Envelope, &ll) == nil {
				b.add(&ll)
			}
		}
	}()
	return nil
}

// add keeps a line of one of the exec's nodes.
func (b *logBook) add(ll *events.LogLine) {
	if ll.WorkflowID != b.id || ll.Node != execNode || b.ours[ll.Formula] == "" {
		return
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	k := logKey{ll.Formula, ll.Attempt}
	h := b.keys[k]
	if h == nil {
		h = &hostLines{}
		b.keys[k] = h
	}
	h.last = time.Now()
	if h.bytes+len(ll.Line) > maxHostOutput {
		h.leftOut++
		return
	}
	h.bytes += len(ll.Line)
	h.lines = append(h.lines, outputLine{Stream: string(ll.Stream), Line: ll.Line, seq: ll.Seq})
}

// complete says whether the lines of an attempt are all in: they end as
// its end's output tails (stdout, stderr) do.
func (b *logBook) complete(k logKey, tails [2]string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	var lines []outputLine
	if h := b.keys[k]; h != nil {
		if h.leftOut > 0 {
			return false // the end is not kept: its lines are in once none has come for a while
		}
		lines = h.lines
	}
	return outputComplete(lines, tails)
}

// lastLine is when the attempt's last line came (zero: none has).
func (b *logBook) lastLine(k logKey) time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	if h := b.keys[k]; h != nil {
		return h.last
	}
	return time.Time{}
}

// take hands an attempt's lines over, in the order they were printed,
// with how many were left out, and forgets them.
func (b *logBook) take(k logKey) ([]outputLine, int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	h := b.keys[k]
	delete(b.keys, k)
	if h == nil {
		return nil, 0
	}
	slices.SortStableFunc(h.lines, func(a, b outputLine) int { return int(a.seq - b.seq) })
	return h.lines, h.leftOut
}

// outputComplete says whether lines end, on each stream, with the
// complete lines of that stream's tail (the tail's first line is left
// out when the tail was cut to its limit, as it may start in a line).
func outputComplete(lines []outputLine, tails [2]string) bool {
	for i, stream := range []events.Stream{events.Stdout, events.Stderr} {
		want := tailLines(tails[i])
		if len(tails[i]) >= events.MaxTailBytes-3 && len(want) > 0 {
			want = want[1:]
		}
		var got []string
		for _, l := range lines {
			if l.Stream == string(stream) {
				got = append(got, l.Line)
			}
		}
		if len(got) < len(want) || !slices.Equal(got[len(got)-len(want):], want) {
			return false
		}
	}
	return true
}

// tailLines splits an output tail into its lines.
func tailLines(tail string) []string {
	if tail == "" {
		return nil
	}
	return strings.Split(strings.TrimSuffix(tail, "\n"), "\n")
}
