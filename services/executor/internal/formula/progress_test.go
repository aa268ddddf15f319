package formula

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
)

// printer is a host whose scripts print their lines on stdout, one by one;
// a line "pause" waits 300ms (more than progress.MinGap) instead, "long"
// 800ms.
type printer struct{}

func (printer) run(_ context.Context, cmd hostexec.Attempt, _ bool) (hostexec.Result, error) {
	if cmd.BeforeStart != nil {
		if err := cmd.BeforeStart(); err != nil {
			return hostexec.Result{ExitCode: -1}, err
		}
	}
	for l := range strings.SplitSeq(cmd.Script, "\n") {
		switch l {
		case "pause":
			time.Sleep(300 * time.Millisecond)
			continue
		case "long":
			time.Sleep(800 * time.Millisecond)
			continue
		}
		cmd.OnLine(hostexec.Stdout, l)
	}
	return hostexec.Result{}, nil
}

// A node's "PROGRESS: n" stdout lines become progress events, in order
// between its running and succeeded events, only for a changed percent and
// at most one per gap (the last one held back comes out before the end);
// every line, these included, is output too. Lines that are not a percent
// (150, abc, on stderr) are only output.
func TestProgressEvents(t *testing.T) {
	t.Parallel()
	h := newHarness()
	h.x.Hosts = runners{r: fake{printer{}}}
	script := strings.Join([]string{"PROGRESS: 10", "pause", "PROGRESS: 10", "PROGRESS: 150", "PROGRESS: abc", "pause",
		"PROGRESS: 50", "PROGRESS: 60", "PROGRESS: 70", "long", "PROGRESS: 100", "PROGRESS: 99"}, "\n")
	if err := h.x.Run(context.Background(), dispatch(dag.OpCreate, 1, node("n", script, 1))); err != nil {
		t.Fatal(err)
	}
	var got []string
	ids := map[string]bool{}
	for _, e := range h.bus.out.Stored() {
		switch p := e.Payload.(type) {
		case *events.NodeEvent:
			got = append(got, string(p.Status))
		case *events.ProgressEvent:
			got = append(got, fmt.Sprintf("%d%%", p.Percent))
			if p.Node != "n" || p.Attempt != 1 || p.Host != "h1" || e.Subject != events.HostLifecycle("h1") || p.Validate() != nil {
				t.Errorf("progress event %+v on %s", p, e.Subject)
			}
			if ids[e.MsgID] {
				t.Errorf("message id %s used twice", e.MsgID)
			}
			ids[e.MsgID] = true
		}
	}
	// 10 at once; 50 at once (the gap passed); 60 and 70 too soon: 70 is
	// held and due after the gap; 100 at once; 99 too soon: out at the end.
	want := []string{"running", "10%", "50%", "70%", "100%", "99%", "succeeded"}
	if !slices.Equal(got, want) {
		t.Fatalf("events %q, want %q", got, want)
	}
	if lines := h.bus.lines; len(lines) != 9 || lines[3] != "PROGRESS: abc" {
		t.Fatalf("output lines %q", lines)
	}
}
