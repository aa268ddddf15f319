//go:build chaos

package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/nats-io/nats.go/jetstream"
)

// natsRounds is nats-server's part of the first run's schedule: how long
// it is up before each kill -9, and how long it stays down. Some kills come
// in quick succession: killed again within a second of coming back, while
// the services reconnect and JetStream recovers its streams and consumers.
var natsRounds = []struct{ up, down time.Duration }{
	{5 * time.Second, 1500 * time.Millisecond},
	{6 * time.Second, time.Second},
	{500 * time.Millisecond, 300 * time.Millisecond},
	{200 * time.Millisecond, time.Second},
	{8 * time.Second, 2 * time.Second},
	{6 * time.Second, 500 * time.Millisecond},
	{time.Second, 200 * time.Millisecond},
	{10 * time.Second, time.Second},
}

// cancelComposition: on each of the 5 hosts, a formula of 6 nodes and one
// of 4 after it, 2 nodes at once, each node 3 s long on its host: 50 nodes,
// about 15 s per host. Each writes "start" and "end" lines with a
// timestamp (ns) to the host's file markers around its work.
func cancelComposition(f *sshtest.Fleet, name, markers string) *dag.Composition {
	c := &dag.Composition{Name: name, Hosts: map[string]dag.Host{}}
	for hi, h := range f.Hosts {
		host := fmt.Sprintf("h%d", hi)
		c.Hosts[host] = dag.Host{Address: h.Addr, User: f.User}
		for fi, nodes := range []int{6, 4} {
			fm := dag.Formula{ID: fmt.Sprintf("%s-c%d", host, fi), Server: host, MaxParallel: 2}
			if fi > 0 {
				fm.DependsOn = []dag.FormulaDep{{Formula: fmt.Sprintf("%s-c%d", host, fi-1)}}
			}
			for ni := 0; ni < nodes; ni++ {
				name := fmt.Sprintf("n%d", ni)
				id := fm.ID + "/" + name
				file := h.Dir + "/" + markers
				fm.Nodes = append(fm.Nodes, dag.Node{Name: name, Timeout: dag.Duration(time.Minute),
					Run: fmt.Sprintf(`echo "start %s $(date +%%s%%N)" >> %s; sleep 3; echo "end %s $(date +%%s%%N)" >> %s`, id, file, id, file)})
			}
			c.Formulas = append(c.Formulas, fm)
		}
	}
	return c
}

// marker is one line a node wrote on its host.
type marker struct {
	kind string // start or end
	node string // formula/node
	at   time.Time
}

// readMarkers reads a host's marker file (none yet: no lines).
func readTimedMarkers(t *testing.T, path string) []marker {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var ms []marker
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) != 3 {
			continue
		}
		ns, err := strconv.ParseInt(f[2], 10, 64)
		if err != nil {
			continue
		}
		ms = append(ms, marker{kind: f[0], node: f[1], at: time.Unix(0, ns)})
	}
	return ms
}

// cancelPhase is the chaos test's second part: a cancel in the middle of
// a workflow whose nodes run for seconds, with the executor and
// nats-server killed -9 around it; twice, on a workflow of its own each
// time: the executor killed before the cancel, and right after it.
type cancelPhase struct {
	t        *testing.T
	fleet    *sshtest.Fleet
	cl       *client.Client // an operator's
	js       jetstream.JetStream
	natsd    *proc
	executor *proc
	port     int
	persist  func(call func() error) error // call, asked again while no service answers
	stamp    func(string)
	// name and file: the current case's composition and marker file.
	name, file string
}

// run runs both cases.
func (cx *cancelPhase) run() {
	cx.name, cx.file = "chaos-cancel-a", "cancel-a-markers"
	cx.runCase(true)
	cx.name, cx.file = "chaos-cancel-b", "cancel-b-markers"
	cx.runCase(false)
}

// markers is every host's cancel-phase lines.
func (cx *cancelPhase) markers() []marker {
	var all []marker
	for _, h := range cx.fleet.Hosts {
		all = append(all, readTimedMarkers(cx.t, h.Dir+"/"+cx.file)...)
	}
	return all
}

// running counts the nodes started and not ended on the hosts.
func (cx *cancelPhase) running() (started, running int) {
	for _, m := range cx.markers() {
		switch m.kind {
		case "start":
			started++
			running++
		case "end":
			running--
		}
	}
	return started, running
}

// doc reads the workflow's document from the state-store (nil: no answer).
func (cx *cancelPhase) doc(id string) *events.WorkflowDoc {
	d, err := cx.cl.WithTimeout(5*time.Second).Status(context.Background(), id)
	if err != nil {
		return nil
	}
	return d
}

// cancel sends the cancel as an operator and returns when the planner's
// reply came. A request that timed out may have been carried out: a retry
// answered 409 "being cancelled" counts as accepted.
func (cx *cancelPhase) cancel(id string) (status string) {
	t := cx.t
	for try := 0; try < 5; try++ {
		r, err := cx.cl.WithTimeout(10*time.Second).Control(context.Background(), id, events.VerbCancel, nil)
		var se *client.ServiceError
		switch {
		case err == nil:
			return string(r.Status)
		case !errors.As(err, &se): // no reply, or not one it could read
			cx.stamp(fmt.Sprintf("cancel request: %v (sent again)", err))
			continue
		case errors.Is(err, client.ErrUnavailable) && strings.Contains(se.Description, "deadline exceeded"):
			// The planner could not do it within the 10 s the client
			// said it waits (a raw request timed out there): the same.
			cx.stamp(fmt.Sprintf("cancel request: %s %s (sent again)", se.Code, se.Description))
			continue
		case se.Code == "409" && try > 0 && strings.Contains(se.Description, "being cancelled"):
			return "already being cancelled (an earlier try was carried out)"
		default:
			t.Fatalf("cancel: %s %s", se.Code, se.Description)
		}
	}
	t.Fatalf("cancel of %s: no reply after 5 tries", id)
	return ""
}

// runCase: nodes run on the hosts; the executor is killed -9 before the
// cancel (executorFirst: the cancel is accepted while it is down, and the
// executor that comes back finds the work of a cancelled run), or 300 ms
// after the cancel was accepted (while it kills the running nodes);
// nats-server is killed -9 right after the cancel; both come back. The
// workflow must end cancelled within 60 s of the restarts, with no node
// left running in the state-store, and no node may start on its host
// after the cancel was accepted.
func (cx *cancelPhase) runCase(executorFirst bool) {
	t := cx.t
	how := "executor killed 300 ms after the cancel"
	if executorFirst {
		how = "executor killed before the cancel"
	}
	phase := "cancel phase (" + how + ")"
	body, _ := json.Marshal(cancelComposition(cx.fleet, cx.name, cx.file))
	var reply events.SubmitReply
	err := cx.persist(func() (err error) {
		reply, err = cx.cl.WithTimeout(30*time.Second).Submit(context.Background(), body, nil)
		return err
	})
	var se *client.ServiceError
	if errors.As(err, &se) {
		t.Fatalf("%s: submit: %s %s", phase, se.Code, se.Description)
	}
	if err != nil {
		t.Fatalf("%s: submit: %v", phase, err)
	}
	id := reply.WorkflowID
	cx.stamp(fmt.Sprintf("%s: workflow %s: 50 nodes of 3 s on 5 sshd hosts", phase, id))

	// The first nodes run on the hosts (at least 8 started, a second
	// into their 3 s).
	deadline := time.Now().Add(90 * time.Second)
	for {
		if started, _ := cx.running(); started >= 8 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: fewer than 8 nodes started on the hosts within 90 s (workflow %s)", phase, id)
		}
		time.Sleep(100 * time.Millisecond)
	}
	time.Sleep(time.Second)

	killExecutor := func() {
		cx.executor.kill9()
		started, running := cx.running()
		cx.stamp(fmt.Sprintf("kill -9 executor (%d nodes started on the hosts, %d of them running)", started, running))
	}
	if executorFirst {
		killExecutor()
		time.Sleep(500 * time.Millisecond)
	}
	sent := time.Now()
	status := cx.cancel(id)
	accepted := time.Now()
	cx.stamp(fmt.Sprintf("cancel of %s accepted: %s (%d ms after it was sent)", id, status, accepted.Sub(sent).Milliseconds()))
	if !executorFirst {
		time.Sleep(300 * time.Millisecond) // it has the cancel, and kills the nodes on their hosts
		killExecutor()
	}
	cx.natsd.kill9()
	cx.stamp("kill -9 nats-server")
	time.Sleep(time.Second)
	cx.natsd.start(t)
	waitPort(t, cx.port)
	cx.stamp("restarted nats-server")
	time.Sleep(500 * time.Millisecond)
	cx.executor.start(t)
	cx.stamp("restarted executor")
	restarted := time.Now()

	// It ends cancelled within 60 s of the restarts.
	var doc *events.WorkflowDoc
	ended := false
	for time.Since(restarted) < 60*time.Second {
		if d := cx.doc(id); d != nil {
			doc = d
			if d.Status.Terminal() {
				ended = true
				break
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	if ended {
		cx.stamp(fmt.Sprintf("workflow %s ended %s, %.1fs after the restarts", id, doc.Status, time.Since(restarted).Seconds()))
	} else {
		status := dag.WorkflowState("unknown (no reply)")
		if doc != nil {
			status = doc.Status
		}
		cx.stamp(fmt.Sprintf("workflow %s not ended 60 s after the restarts: %s", id, status))
	}

	// The state-store has applied every event: what it says of the nodes.
	caughtUp := time.Now().Add(30 * time.Second)
	for !stateCaughtUp(cx.js) && time.Now().Before(caughtUp) {
		time.Sleep(200 * time.Millisecond)
	}
	if d := cx.doc(id); d != nil {
		doc = d
	}
	var runningNodes []string
	counts := map[dag.NodeState]int{}
	if doc != nil {
		for fid, f := range doc.Formulas {
			for name, n := range f.Nodes {
				counts[n.Status]++
				if n.Status == dag.NodeRunning {
					runningNodes = append(runningNodes, fid+"/"+name)
				}
			}
		}
	}
	sort.Strings(runningNodes)
	total := 0
	if doc != nil {
		total = doc.NodeCount
	}
	fmt.Printf("chaos: %s: the state-store's nodes by state: %v, of %d nodes\n", phase, counts, total)
	switch {
	case doc == nil:
		t.Errorf("%s: the state-store has no document of %s", phase, id)
	case !ended:
		t.Errorf("%s: workflow %s did not end within 60 s of the executor's and nats-server's restarts: still %s; nodes running in the state-store: %v", phase, id, doc.Status, runningNodes)
	case doc.Status != dag.WorkflowCancelled:
		t.Errorf("%s: workflow %s ended %s, not cancelled: %s", phase, id, doc.Status, doc.Error)
	}
	if ended && len(runningNodes) > 0 {
		t.Errorf("%s: workflow %s ended %s but the state-store still has %d node(s) running: %v", phase, id, doc.Status, len(runningNodes), runningNodes)
	}

	// On the hosts: no node started after the cancel was accepted (by the
	// planner's clock when its record of the request says, else when its
	// reply came), and none started twice.
	if doc != nil {
		for _, r := range doc.Requests {
			if !r.At.IsZero() && r.At.Before(accepted) && r.At.After(sent.Add(-time.Second)) {
				cx.stamp(fmt.Sprintf("(the planner recorded the cancel %d ms after it was sent)", r.At.Sub(sent).Milliseconds()))
				accepted = r.At
				break
			}
		}
	}
	starts, ends, endsAfter := map[string]int{}, 0, 0
	var late []string
	for _, m := range cx.markers() {
		switch m.kind {
		case "start":
			starts[m.node]++
			if m.at.After(accepted) {
				late = append(late, fmt.Sprintf("%s %.2fs after", m.node, m.at.Sub(accepted).Seconds()))
			}
		case "end":
			ends++
			if m.at.After(accepted) {
				endsAfter++
			}
		}
	}
	if len(late) > 0 {
		t.Errorf("%s: %d node(s) started on their hosts after the cancel was accepted: %v", phase, len(late), late)
	}
	twice := 0
	for node, n := range starts {
		if n > 1 {
			twice++
			t.Errorf("%s: %s started %d times on its host", phase, node, n)
		}
	}
	fmt.Printf("chaos: %s: %d of 50 nodes started on the hosts, %d after the cancel, %d twice; %d ended, %d of them after the cancel\n",
		phase, len(starts), len(late), twice, ends, endsAfter)
}
