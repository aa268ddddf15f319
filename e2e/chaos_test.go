//go:build chaos

package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/nats-io/nats.go/micro"
)

// proc is a separate OS process that the chaos test kills and restarts.
type proc struct {
	name string
	args []string
	env  []string
	log  *os.File
	mu   sync.Mutex
	cmd  *exec.Cmd
}

func (p *proc) start(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", p.name, err) // may run in a schedule goroutine
		return
	}
	p.cmd = cmd
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *proc) kill9() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Kill()
	_ = p.cmd.Wait()
	p.cmd = nil
}

func bin(t *testing.T, name string) string {
	dir := os.Getenv("GANTRY_BIN")
	if dir == "" {
		dir = "../bin"
	}
	p, _ := filepath.Abs(filepath.Join(dir, name))
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not built (make chaos builds it): %v", p, err)
	}
	return p
}

func freePort(t *testing.T) int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitPort(t *testing.T, port int) {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond); err == nil {
			c.Close()
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("nothing listening on %d", port)
}

// chaosComposition: 5 hosts x 4 formulas x 10 nodes = 200 nodes, with the
// default retry policy (one attempt). On each host the formulas form a
// chain; the second has a health gate that passes only 1.5 s after its
// last node ended, so it probes a few times; the third also waits for the
// next host's second formula (healthy). Every node writes "start" and
// "end" lines with a timestamp to the host's marker file around its work.
func chaosComposition(f *sshtest.Fleet, work string) *dag.Composition {
	c := &dag.Composition{Name: "chaos", Hosts: map[string]dag.Host{}}
	for hi, h := range f.Hosts {
		host := fmt.Sprintf("h%d", hi)
		c.Hosts[host] = dag.Host{Address: h.Addr, User: f.User}
		for fi := 0; fi < 4; fi++ {
			fm := dag.Formula{ID: fmt.Sprintf("%s-f%d", host, fi), Server: host, MaxParallel: 1 + fi%2}
			if fi > 0 {
				fm.DependsOn = []dag.FormulaDep{{Formula: fmt.Sprintf("%s-f%d", host, fi-1)}}
			}
			if fi == 2 {
				fm.DependsOn = append(fm.DependsOn, dag.FormulaDep{Formula: fmt.Sprintf("h%d-f1", (hi+1)%len(f.Hosts)), Condition: dag.ConditionHealthy})
			}
			if fi == 1 {
				fm.HealthGate = &dag.HealthGate{Check: fmt.Sprintf(`t=$(grep "^end %s/n9 " %s/markers | tail -n 1 | cut -d' ' -f3); [ -n "$t" ] && [ $(( $(date +%%s%%N) - t )) -ge 1500000000 ]`, fm.ID, h.Dir),
					Timeout: dag.Duration(20 * time.Second), Retries: 10}
			}
			for ni := 0; ni < 10; ni++ {
				name := fmt.Sprintf("n%d", ni)
				id := fm.ID + "/" + name
				fm.Nodes = append(fm.Nodes, dag.Node{Name: name, Timeout: dag.Duration(time.Minute),
					Run: fmt.Sprintf(`echo "start %s $(date +%%s%%N)" >> %s/markers; %s; echo "end %s $(date +%%s%%N)" >> %s/markers`, id, h.Dir, work, id, h.Dir)})
			}
			c.Formulas = append(c.Formulas, fm)
		}
	}
	return c
}

// hostRuns reads a host's marker file: for each node, its starts and ends
// in order.
func hostRuns(t *testing.T, h *sshtest.Host) map[string][]string {
	t.Helper()
	b, err := os.ReadFile(h.Dir + "/markers")
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	runs := map[string][]string{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(l)
		if len(f) == 3 {
			runs[f[1]] = append(runs[f[1]], f[0])
		}
	}
	return runs
}

// runFaults says what is wrong with a node's starts and ends on its host:
// two copies at once, a run after a success, or an attempt that never
// ended (killed on the host).
func runFaults(seq []string) []string {
	var faults []string
	open, ended := 0, 0
	for _, s := range seq {
		switch s {
		case "start":
			if open > 0 {
				faults = append(faults, "overlap")
			}
			if ended > 0 {
				faults = append(faults, "ran again after it succeeded")
			}
			open++
		case "end":
			open--
			ended++
		}
	}
	if open > 0 {
		faults = append(faults, "an attempt never ended")
	}
	if ended == 0 {
		faults = append(faults, "never ran to its end")
	}
	return faults
}

// trigger waits until the stream shows work in flight of the kind a
// service handles, so a kill lands on it.
type trigger struct {
	mu    sync.Mutex
	armed map[string]chan struct{}
}

// arm returns a channel closed at the next work in flight of the kind the
// service's kills wait for.
func (tr *trigger) arm(service string) chan struct{} {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	ch := make(chan struct{})
	tr.armed[service] = ch
	return ch
}

func (tr *trigger) fire(kind string) {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	for name, ch := range tr.armed {
		if chaosAim[name] == kind {
			close(ch)
			delete(tr.armed, name)
		}
	}
}

// chaosAim is the kind of work in flight each service's kills wait for.
var chaosAim = map[string]string{"executor": "node", "health-gate": "gate", "planner": "decision", "state-store": "any"}

// watchInFlight fires "node" on a node starting, "gate" on a failed probe
// with more to come, "decision" on a formula outcome the planner is about
// to act on, and "any" on every event.
func watchInFlight(t *testing.T, nc *nats.Conn, tr *trigger) {
	_, err := nc.Subscribe("decky.>", func(m *nats.Msg) {
		env, err := events.Parse(m.Data)
		if err != nil {
			return
		}
		tr.fire("any")
		switch {
		case env.Type == events.NodeType(dag.NodeRunning):
			tr.fire("node")
		case env.Type == events.TypeHealthAttempt:
			tr.fire("gate")
		case env.Type == events.FormulaType(dag.FormulaSucceeded):
			tr.fire("decision")
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestChaos(t *testing.T) {
	fleet := sshtest.Start(t, 5, sshtest.Options{})
	dir := t.TempDir()
	logs, _ := os.Create(filepath.Join(dir, "processes.log"))
	defer logs.Close()
	port := freePort(t)
	url := fmt.Sprintf("nats://127.0.0.1:%d", port)
	keys, err := busauth.LoadOrCreate(filepath.Join(dir, "auth"), busauth.Admin)
	if err != nil {
		t.Fatal(err)
	}
	conf, err := keys.WriteServerConfig(busauth.ServerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	natsd := &proc{name: "nats-server", log: logs, args: []string{bin(t, "nats-server"), "-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js"), "-n", "chaos"}}
	natsd.start(t)
	waitPort(t, port)
	env := []string{"NATS_URL=" + url, "GANTRY_SSH_KEY=" + fleet.KeyFile, "GANTRY_KNOWN_HOSTS=" + fleet.KnownHosts}
	svcs := []*proc{}
	for _, name := range []string{"planner", "executor", "health-gate", "state-store"} {
		svcs = append(svcs, &proc{name: name, log: logs, env: append(env, "NATS_NKEY="+keys.SeedFile(events.Identity(name))), args: []string{bin(t, name)}})
	}
	for _, p := range svcs {
		p.start(t)
	}
	defer func() {
		for _, p := range svcs {
			p.kill9()
		}
		natsd.kill9()
	}()
	// Requests as an operator; streams and buckets looked at as an
	// administrator.
	connect := func(id events.Identity) *nats.Conn {
		opt, err := nats.NkeyOptionFromSeed(keys.SeedFile(id))
		if err != nil {
			t.Fatal(err)
		}
		nc, err := nats.Connect(url, opt, nats.MaxReconnects(-1), nats.ReconnectWait(100*time.Millisecond))
		if err != nil {
			t.Fatal(err)
		}
		return nc
	}
	nc, admin := connect(events.Operator), connect(busauth.Admin)
	defer nc.Close()
	defer admin.Close()
	js, _ := jetstream.New(admin)
	request := func(subj string, body []byte) (*nats.Msg, error) {
		var m *nats.Msg
		var err error
		for i := 0; i < 100; i++ {
			if m, err = nc.Request(subj, body, 2*time.Second); err == nil {
				return m, nil
			}
			time.Sleep(200 * time.Millisecond)
		}
		return nil, err
	}
	comp := chaosComposition(fleet, "sleep 0.5")
	body, _ := json.Marshal(comp)
	msg, err := request(events.SubjectSubmit, body)
	if err != nil || msg.Header.Get(micro.ErrorCodeHeader) != "" {
		t.Fatalf("submit: %v %s", err, msg.Data)
	}
	var reply events.SubmitReply
	decodeReply(msg, &reply)
	id := reply.WorkflowID
	fmt.Printf("chaos: workflow %s: 200 nodes on 5 sshd hosts\n", id)
	start := time.Now()

	// The schedule: each service killed -9 three times, each kill aimed at
	// work of its kind in flight (the executor just as a node starts, the
	// health-gate between two probes of a gate, the planner just as a
	// formula outcome arrives, the state-store as events arrive), the
	// services independently of each other; and nats-server killed -9 and
	// restarted twice.
	var kills []string
	var killsMu sync.Mutex
	stamp := func(s string) {
		killsMu.Lock()
		defer killsMu.Unlock()
		line := fmt.Sprintf("%6.1fs %s", time.Since(start).Seconds(), s)
		kills = append(kills, line)
		fmt.Println("chaos:", line)
	}
	tr := &trigger{armed: map[string]chan struct{}{}}
	watchInFlight(t, admin, tr)
	aim := chaosAim
	var aimed atomic.Int32
	var schedule sync.WaitGroup
	for _, p := range svcs {
		schedule.Add(1)
		go func() {
			defer schedule.Done()
			for round := 0; round < 3; round++ {
				what := "at a random moment (nothing of its kind in flight for 20 s)"
				select {
				case <-tr.arm(p.name):
					what = "with " + aim[p.name] + " work in flight"
					aimed.Add(1)
				case <-time.After(20 * time.Second):
				}
				p.kill9()
				stamp("kill -9 " + p.name + " " + what)
				time.Sleep(700 * time.Millisecond)
				p.start(t)
				stamp("restarted " + p.name)
				time.Sleep(1500 * time.Millisecond)
			}
		}()
	}
	for round := 0; round < 2; round++ {
		time.Sleep(6 * time.Second)
		natsd.kill9()
		stamp("kill -9 nats-server")
		time.Sleep(1500 * time.Millisecond)
		natsd.start(t)
		waitPort(t, port)
		stamp("restarted nats-server")
	}
	schedule.Wait()

	// Wait for the end.
	var doc events.WorkflowDoc
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if m, err := nc.Request(events.StateWorkflow, []byte(`{"workflow_id":"`+id+`"}`), 5*time.Second); err == nil && m.Header.Get(micro.ErrorCodeHeader) == "" {
			if decodeReply(m, &doc) == nil && doc.Status.Terminal() {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("workflow did not end within 6 minutes (status %s)", doc.Status)
		}
		time.Sleep(500 * time.Millisecond)
	}
	fmt.Printf("chaos: workflow %s after %.1fs\n", doc.Status, time.Since(start).Seconds())
	if doc.Status != dag.WorkflowSucceeded {
		t.Errorf("workflow ended %s: %s", doc.Status, doc.Error)
	}

	// On the hosts: each node started once and ended once; no overlap, no
	// run after a success, no attempt killed on the host.
	faulty, attempts := 0, 0
	for hi, h := range fleet.Hosts {
		runs := hostRuns(t, h)
		for fi := 0; fi < 4; fi++ {
			for ni := 0; ni < 10; ni++ {
				node := fmt.Sprintf("h%d-f%d/n%d", hi, fi, ni)
				seq := runs[node]
				for _, s := range seq {
					if s == "start" {
						attempts++
					}
				}
				if f := runFaults(seq); len(f) > 0 {
					faulty++
					t.Errorf("%s on its host: %s (%v)", node, strings.Join(f, ", "), seq)
				}
			}
		}
	}
	fmt.Printf("chaos: 200 nodes, %d runs started on the hosts, %d nodes with overlaps, re-runs or killed runs\n", attempts, faulty)

	// No node ran again after it was recorded succeeded: in the stream, no
	// running event for a node follows its first succeeded event. The same
	// pass folds the stream into each node's and formula's state, written
	// here, apart from the state-store's code, to compare with its
	// projection.
	cons, _ := js.OrderedConsumer(context.Background(), events.StreamEvents, jetstream.OrderedConsumerConfig{})
	succeeded := map[string]bool{}
	fold := map[string]dag.NodeState{}
	foldAttempts := map[string]map[int]bool{}
	foldFormulas := map[string]dag.FormulaState{}
	ranAfter := 0
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := events.Parse(m.Data())
			if err != nil || !strings.HasPrefix(env.Subject, id) {
				continue
			}
			switch env.Type.Family() {
			case events.FamilyFormula:
				var fe events.FormulaEvent
				if events.DecodeData(env, &fe) == nil && formulaRank(fe.Status) >= formulaRank(foldFormulas[fe.Formula]) {
					foldFormulas[fe.Formula] = fe.Status
				}
				continue
			case events.FamilyNode:
			default:
				continue
			}
			var ne events.NodeEvent
			if events.DecodeData(env, &ne) != nil {
				continue
			}
			k := ne.Formula + "/" + ne.Node
			if !ne.Status.Done() || !fold[k].Done() {
				fold[k] = ne.Status
			}
			if ne.Status == dag.NodeRunning {
				if foldAttempts[k] == nil {
					foldAttempts[k] = map[int]bool{}
				}
				foldAttempts[k][ne.Attempt] = true
			}
			switch {
			case ne.Status == dag.NodeRunning && succeeded[k]:
				ranAfter++
				t.Errorf("%s ran again (attempt %d) after it was recorded succeeded", k, ne.Attempt)
			case ne.Status == dag.NodeSucceeded:
				succeeded[k] = true
			}
		}
		if n == 0 {
			break
		}
	}
	fmt.Printf("chaos: %d nodes recorded succeeded; %d ran again afterwards\n", len(succeeded), ranAfter)

	// The projection agrees with the fold.
	deadline = time.Now().Add(time.Minute)
	for !stateCaughtUp(js) {
		if time.Now().After(deadline) {
			t.Fatal("state-store did not catch up")
		}
		time.Sleep(200 * time.Millisecond)
	}
	if m, err := request(events.StateWorkflow, []byte(`{"workflow_id":"`+id+`"}`)); err == nil {
		decodeReply(m, &doc)
	}
	differ := 0
	for fid, f := range doc.Formulas {
		if f.Status != foldFormulas[fid] {
			differ++
			t.Errorf("%s: projection %s, stream %s", fid, f.Status, foldFormulas[fid])
		}
		for name, nd := range f.Nodes {
			k := fid + "/" + name
			if nd.Status != fold[k] || nd.Attempts != len(foldAttempts[k]) {
				differ++
				t.Errorf("%s: projection %s after %d attempts, stream %s after %d", k, nd.Status, nd.Attempts, fold[k], len(foldAttempts[k]))
			}
		}
	}
	if len(doc.Formulas) != 20 || len(fold) != 200 {
		t.Errorf("projection has %d formulas, the stream %d nodes", len(doc.Formulas), len(fold))
	}
	fmt.Printf("chaos: projection vs an independent fold of the stream: %d formulas, %d nodes, %d differ\n", len(doc.Formulas), len(fold), differ)

	// And with a rebuild from the stream by the state-store itself.
	m, err := request(events.StateRebuild, []byte(`{"check_only":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Keys      int      `json:"keys"`
		UpTo      uint64   `json:"up_to"`
		Differing []string `json:"differing"`
	}
	decodeReply(m, &rep)
	fmt.Printf("chaos: projection vs rebuild from %d events: %d documents, %d differ %v\n", rep.UpTo, rep.Keys, len(rep.Differing), rep.Differing)
	if rep.Keys == 0 || len(rep.Differing) != 0 {
		t.Errorf("projection differs from a rebuild: %v", rep.Differing)
	}
	verdict := "PASS"
	if t.Failed() {
		verdict = "FAIL"
	}
	fmt.Printf("chaos: %d kills/restarts, %d of 12 service kills with their kind of work in flight; verdict %s\n", len(kills), aimed.Load(), verdict)
}

// formulaRank orders formula states so the fold keeps the furthest one.
func formulaRank(s dag.FormulaState) int {
	switch s {
	case "":
		return -1
	case dag.FormulaPending:
		return 0
	case dag.FormulaReady:
		return 1
	case dag.FormulaRunning:
		return 2
	case dag.FormulaSucceeded:
		return 3
	case dag.FormulaGating:
		return 4
	}
	return 5
}
