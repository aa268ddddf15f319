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
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// proc is a separate OS process that the chaos test kills and restarts.
// Its output goes to a log file of its own, kept across restarts, so a
// panic in it can be told apart from the others' (crashes).
type proc struct {
	name string
	args []string
	env  []string
	log  *os.File
	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan struct{} // closed when cmd has exited
	// starts counts the starts; exits are the exits the test did not
	// cause (a crash, or a service that gave up), in order; closed says
	// the test is over: an exit is not restarted.
	starts int
	exits  []string
	closed bool
	since  time.Time // the chaos clock's zero, for the exits' times
}

func (p *proc) start(t *testing.T) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.startLocked(t)
}

func (p *proc) startLocked(t *testing.T) {
	if p.closed || p.cmd != nil {
		return
	}
	p.starts++
	fmt.Fprintf(p.log, "=== chaos: start %d of %s at %.1fs\n", p.starts, p.name, time.Since(p.since).Seconds())
	cmd := exec.Command(p.args[0], p.args[1:]...)
	cmd.Env = append(os.Environ(), p.env...)
	cmd.Stdout, cmd.Stderr = p.log, p.log
	if err := cmd.Start(); err != nil {
		t.Errorf("start %s: %v", p.name, err) // may run in a schedule goroutine
		return
	}
	done := make(chan struct{})
	p.cmd, p.done = cmd, done
	go p.watch(t, cmd, done)
}

// watch waits for cmd to exit. An exit the test did not cause (kill9
// clears p.cmd first) is recorded, and the process is started again a
// second later, as the compose stack's restart policy (unless-stopped)
// would: a panic in it is found in its log at the end (panics).
func (p *proc) watch(t *testing.T, cmd *exec.Cmd, done chan struct{}) {
	err := cmd.Wait()
	close(done)
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != cmd {
		return // killed by the test
	}
	p.cmd = nil
	if p.closed {
		return
	}
	what := fmt.Sprintf("%.1fs %s exited by itself (%v)", time.Since(p.since).Seconds(), p.name, err)
	p.exits = append(p.exits, what)
	fmt.Fprintf(p.log, "=== chaos: %s\n", what)
	fmt.Println("chaos:", what, "- restarted in 1 s")
	go func() {
		time.Sleep(time.Second)
		p.start(t)
	}()
}

// kill9 sends SIGKILL and waits for the process to be gone.
func (p *proc) kill9() {
	p.mu.Lock()
	cmd, done := p.cmd, p.done
	p.cmd = nil
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	_ = cmd.Process.Kill()
	<-done
}

// stop kills the process for good: nothing restarts it.
func (p *proc) stop() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
	p.kill9()
}

// panics reads the process's log for a Go panic or fatal error (the
// runtime writes "panic: " or "fatal error: " at the start of a line) and
// returns, for each, its first lines.
func (p *proc) panics() []string {
	b, err := os.ReadFile(p.log.Name())
	if err != nil {
		return []string{"cannot read its log: " + err.Error()}
	}
	var found []string
	lines := strings.Split(string(b), "\n")
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if !strings.HasPrefix(l, "panic: ") && !strings.HasPrefix(l, "fatal error: ") {
			continue
		}
		// Its first lines, up to the next start of the process; what
		// follows in that run of it is the same crash.
		next := i + 1
		for next < len(lines) && !strings.HasPrefix(lines[next], "=== chaos: start") {
			next++
		}
		found = append(found, strings.Join(lines[i:min(i+16, next)], "\n"))
		i = next - 1
	}
	return found
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
	// Each process's log, kept when the test fails.
	logDir, err := os.MkdirTemp("", "gantry-chaos-logs-")
	if err != nil {
		t.Fatal(err)
	}
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
	clock := time.Now() // moved to the submit below
	newProc := func(name string, env []string, args ...string) *proc {
		f, err := os.OpenFile(filepath.Join(logDir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		return &proc{name: name, log: f, env: env, args: args, since: clock}
	}
	natsd := newProc("nats-server", nil, bin(t, "nats-server"), "-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js"), "-n", "chaos")
	natsd.start(t)
	waitPort(t, port)
	env := []string{"NATS_URL=" + url, "GANTRY_SSH_KEY=" + fleet.KeyFile, "GANTRY_KNOWN_HOSTS=" + fleet.KnownHosts}
	svcs := []*proc{}
	byName := map[string]*proc{}
	for _, name := range []string{"planner", "executor", "health-gate", "state-store"} {
		p := newProc(name, append(env, "NATS_NKEY="+keys.SeedFile(events.Identity(name))), bin(t, name))
		svcs = append(svcs, p)
		byName[name] = p
	}
	for _, p := range svcs {
		p.start(t)
	}
	all := append([]*proc{natsd}, svcs...)
	// At the end, whatever ended the test: every process stopped, and no
	// process may have panicked or died of a fatal error at any time of
	// the run (a kill -9 leaves no such line).
	defer func() {
		panicked := false
		for _, p := range svcs {
			p.stop()
		}
		natsd.stop()
		for _, p := range all {
			for _, pn := range p.panics() {
				panicked = true
				t.Errorf("%s panicked (started %d times):\n%s", p.name, p.starts, pn)
			}
			if len(p.exits) > 0 {
				fmt.Printf("chaos: %s exited by itself %d time(s): %s\n", p.name, len(p.exits), strings.Join(p.exits, "; "))
			}
			p.log.Close()
		}
		verdict := "PASS"
		if t.Failed() {
			verdict = "FAIL"
			fmt.Printf("chaos: the processes' logs are kept in %s\n", logDir)
		} else {
			_ = os.RemoveAll(logDir)
		}
		fmt.Printf("chaos: no process panicked: %v; verdict %s\n", !panicked, verdict)
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
	// The services are asked through the gantry client; persist asks
	// again while no service answers (nats-server killed): an answer,
	// an error reply or not, ends it.
	cl := client.New(nc, 5*time.Second)
	persist := func(call func() error) error {
		var err error
		for i := 0; i < 100; i++ {
			if err = call(); answered(err) {
				return err
			}
			time.Sleep(200 * time.Millisecond)
		}
		return err
	}
	comp := chaosComposition(fleet, "sleep 0.5")
	body, _ := json.Marshal(comp)
	var reply events.SubmitReply
	err = persist(func() (err error) {
		reply, err = cl.WithTimeout(30*time.Second).Submit(context.Background(), body, nil)
		return err
	})
	if err != nil {
		t.Fatalf("submit: %s", failure(err))
	}
	id := reply.WorkflowID
	fmt.Printf("chaos: workflow %s: 200 nodes on 5 sshd hosts\n", id)
	start := time.Now()
	for _, p := range all {
		p.mu.Lock()
		p.since = start
		p.mu.Unlock()
	}

	// The schedule: each service killed -9 three times, each kill aimed at
	// work of its kind in flight (the executor just as a node starts, the
	// health-gate between two probes of a gate, the planner just as a
	// formula outcome arrives, the state-store as events arrive), the
	// services independently of each other; and nats-server killed -9 and
	// restarted 8 times (natsRounds).
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
	// nats-server: killed -9 8 times, some in quick succession (killed
	// again within a second of coming back, while the services reconnect
	// and JetStream recovers its streams): how long it is up before each
	// kill, and down after it.
	for _, round := range natsRounds {
		time.Sleep(round.up)
		natsd.kill9()
		stamp(fmt.Sprintf("kill -9 nats-server (up %s)", round.up))
		time.Sleep(round.down)
		natsd.start(t)
		waitPort(t, port)
		stamp(fmt.Sprintf("restarted nats-server (down %s)", round.down))
	}
	schedule.Wait()

	// Wait for the end.
	var doc events.WorkflowDoc
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if d, err := cl.WithTimeout(5*time.Second).Status(context.Background(), id); err == nil {
			if doc = *d; doc.Status.Terminal() {
				break
			}
		}
		if time.Now().After(deadline) {
			chaosStuck(nc, doc)
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
	// Each node's events in stream order, to show what came after a
	// success: stream sequence, status, attempt, when it was emitted and
	// by whom.
	history := map[string][]string{}
	succeededAt := map[string]time.Time{}
	var again []string
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
			var seq uint64
			if md, err := m.Metadata(); err == nil {
				seq = md.Sequence.Stream
			}
			history[k] = append(history[k], fmt.Sprintf("#%d %s attempt %d emitted %s by %s", seq, ne.Status, ne.Attempt, env.Time.Format("15:04:05.000"), env.Source))
			switch {
			case ne.Status == dag.NodeRunning && succeeded[k]:
				ranAfter++
				how := "ran again"
				if env.Time.Before(succeededAt[k]) {
					// Emitted before the success, stored after it.
					how = "has a running event stored after its succeeded one (emitted before it: out of order in the stream)"
				}
				again = append(again, fmt.Sprintf("%s %s (attempt %d) after it was recorded succeeded", k, how, ne.Attempt))
			case ne.Status == dag.NodeSucceeded && !succeeded[k]:
				succeeded[k] = true
				succeededAt[k] = env.Time
			}
		}
		if n == 0 {
			break
		}
	}
	for _, a := range again {
		k, _, _ := strings.Cut(a, " ")
		t.Errorf("%s; its events in the stream:\n  %s", a, strings.Join(history[k], "\n  "))
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
	var last *events.WorkflowDoc
	if err := persist(func() (err error) { last, err = cl.Status(context.Background(), id); return err }); err == nil {
		doc = *last
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
	var rep events.RebuildReport
	err = persist(func() (err error) {
		rep, err = cl.WithTimeout(time.Minute).Rebuild(context.Background(), events.RebuildQuery{CheckOnly: true})
		return err
	})
	if !answered(err) {
		t.Fatal(err)
	}
	if err != nil {
		t.Errorf("rebuild: %s", failure(err))
	}
	fmt.Printf("chaos: projection vs rebuild from %d events: %d documents, %d differ %v\n", rep.UpTo, rep.Keys, len(rep.Differing), rep.Differing)
	fmt.Printf("chaos: the stream's own check: %d problem(s)\n", len(rep.Findings))
	for _, f := range rep.Findings {
		fmt.Printf("chaos:   %s %s %s/%s at %v: %s\n", f.Kind, f.WorkflowID, f.Formula, f.Node, f.Seqs, f.Detail)
	}
	if rep.Keys == 0 || len(rep.Differing) != 0 {
		t.Errorf("projection differs from a rebuild: %v", rep.Differing)
	}

	// Then a cancel in the middle of a second workflow, with the executor
	// and nats-server killed around it.
	cx := &cancelPhase{t: t, fleet: fleet, cl: cl, js: js, natsd: natsd, executor: byName["executor"], port: port, persist: persist, stamp: stamp}
	cx.run()

	fmt.Printf("chaos: %d kills/restarts, %d of 12 service kills with their kind of work in flight\n", len(kills), aimed.Load())
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

// chaosStuck prints what a run that did not end was waiting for: its
// formulas that had not ended, and the dispatches and events the
// services' consumers had not taken or acknowledged.
func chaosStuck(nc *nats.Conn, doc events.WorkflowDoc) {
	for id, f := range doc.Formulas {
		if f.Status != dag.FormulaHealthy && f.Status != dag.FormulaSucceeded {
			fmt.Printf("chaos: stuck: formula %s %s\n", id, f.Status)
		}
	}
	js, err := jetstream.New(nc)
	if err != nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, c := range []struct{ stream, consumer string }{{events.StreamDispatch, "executor"}, {events.StreamEvents, "planner"}} {
		ci, err := js.Consumer(ctx, c.stream, c.consumer)
		if err != nil {
			fmt.Printf("chaos: stuck: consumer %s of %s: %v\n", c.consumer, c.stream, err)
			continue
		}
		info, err := ci.Info(ctx)
		if err != nil {
			fmt.Printf("chaos: stuck: consumer %s of %s: %v\n", c.consumer, c.stream, err)
			continue
		}
		fmt.Printf("chaos: stuck: consumer %s of %s: %d pending, %d waiting for an ack, %d redelivered, delivered up to %d, acked up to %d\n",
			c.consumer, c.stream, info.NumPending, info.NumAckPending, info.NumRedelivered, info.Delivered.Stream, info.AckFloor.Stream)
	}
}
