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
	"sort"
	"strconv"
	"strings"
	"sync"
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
		t.Fatalf("start %s: %v", p.name, err)
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

// chaosComposition: 5 hosts x 4 formulas x 10 nodes = 200 nodes. On each
// host the formulas form a chain; the second has a health gate; the third
// also waits for the next host's second formula (healthy). Every node
// appends its name to the host's marker file, then works for a while.
func chaosComposition(f *sshtest.Fleet, work string) *dag.Composition {
	c := &dag.Composition{Name: "chaos", Hosts: map[string]dag.Host{},
		Retry: &dag.RetryPolicy{MaxAttempts: 5, InitialInterval: dag.Duration(200 * time.Millisecond), MaxInterval: dag.Duration(2 * time.Second), Multiplier: 2}}
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
				fm.HealthGate = &dag.HealthGate{Check: fmt.Sprintf("grep -q '^%s/' %s/markers", fm.ID, h.Dir), Timeout: dag.Duration(20 * time.Second), Retries: 5}
			}
			for ni := 0; ni < 10; ni++ {
				name := fmt.Sprintf("n%d", ni)
				fm.Nodes = append(fm.Nodes, dag.Node{Name: name, Run: fmt.Sprintf("echo %s/%s >> %s/markers; %s", fm.ID, name, h.Dir, work), Timeout: dag.Duration(time.Minute)})
			}
			c.Formulas = append(c.Formulas, fm)
		}
	}
	return c
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
	json.Unmarshal(msg.Data, &reply)
	id := reply.WorkflowID
	fmt.Printf("chaos: workflow %s: 200 nodes on 5 sshd hosts\n", id)
	start := time.Now()

	// The schedule: each service killed -9 three times, in turn, and
	// nats-server killed -9 and restarted twice, spread over the run.
	var kills []string
	stamp := func(s string) {
		line := fmt.Sprintf("%6.1fs %s", time.Since(start).Seconds(), s)
		kills = append(kills, line)
		fmt.Println("chaos:", line)
	}
	for round := 0; round < 3; round++ {
		for _, p := range svcs {
			time.Sleep(1200 * time.Millisecond)
			p.kill9()
			stamp("kill -9 " + p.name)
			time.Sleep(700 * time.Millisecond)
			p.start(t)
			stamp("restarted " + p.name)
		}
		if round < 2 {
			time.Sleep(1200 * time.Millisecond)
			natsd.kill9()
			stamp("kill -9 nats-server")
			time.Sleep(1500 * time.Millisecond)
			natsd.start(t)
			waitPort(t, port)
			stamp("restarted nats-server")
		}
	}

	// Wait for the end.
	var doc events.WorkflowDoc
	deadline := time.Now().Add(6 * time.Minute)
	for {
		if m, err := nc.Request(events.StateWorkflow, []byte(`{"workflow_id":"`+id+`"}`), 5*time.Second); err == nil && m.Header.Get(micro.ErrorCodeHeader) == "" {
			if json.Unmarshal(m.Data, &doc) == nil && doc.Status.Terminal() {
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

	// Attempts recorded (executor records) against marker lines.
	kv, err := js.KeyValue(context.Background(), events.BucketNodes)
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		node              string
		attempts, markers int
	}
	var rows []row
	mismatch, retried := 0, 0
	for hi, h := range fleet.Hosts {
		m := markers(t, h)
		for fi := 0; fi < 4; fi++ {
			fid := fmt.Sprintf("h%d-f%d", hi, fi)
			for ni := 0; ni < 10; ni++ {
				name := fmt.Sprintf("n%d", ni)
				e, err := kv.Get(context.Background(), events.NodeKey(id, dag.OpCreate, fid, name))
				var rec struct {
					Status  dag.NodeState `json:"status"`
					Attempt int           `json:"attempt"`
				}
				if err == nil {
					json.Unmarshal(e.Value(), &rec)
				}
				r := row{fid + "/" + name, rec.Attempt, m[fid+"/"+name]}
				rows = append(rows, r)
				if r.attempts != r.markers {
					mismatch++
				}
				if r.attempts > 1 {
					retried++
				}
				if rec.Status != dag.NodeSucceeded {
					t.Errorf("%s recorded %s", r.node, rec.Status)
				}
			}
		}
	}
	sort.Slice(rows, func(i, j int) bool { return rows[i].node < rows[j].node })
	fmt.Println("chaos: nodes with more than one attempt (node attempts markers):")
	for _, r := range rows {
		if r.attempts > 1 || r.attempts != r.markers {
			fmt.Printf("chaos:   %-10s %d %d\n", r.node, r.attempts, r.markers)
		}
	}
	fmt.Printf("chaos: %d nodes, %d ran more than once, %d with markers != attempts\n", len(rows), retried, mismatch)
	if mismatch > 0 {
		t.Errorf("%d nodes have a marker count different from their recorded attempts", mismatch)
	}

	// No node ran again after it was recorded succeeded: in the stream, no
	// running event for a node follows its first succeeded event.
	cons, _ := js.OrderedConsumer(context.Background(), events.StreamEvents, jetstream.OrderedConsumerConfig{})
	succeeded := map[string]bool{}
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
			if err != nil || env.Type.Family() != events.FamilyNode || !strings.HasPrefix(env.Subject, id) {
				continue
			}
			var ne events.NodeEvent
			if events.DecodeData(env, &ne) != nil {
				continue
			}
			k := ne.Formula + "/" + ne.Node
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

	// The projection equals a rebuild from the stream.
	deadline = time.Now().Add(time.Minute)
	for {
		if stateCaughtUp(js) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("state-store did not catch up")
		}
		time.Sleep(200 * time.Millisecond)
	}
	m, err := request(events.StateRebuild, []byte(`{"check_only":true}`))
	if err != nil {
		t.Fatal(err)
	}
	var rep struct {
		Keys      int      `json:"keys"`
		UpTo      uint64   `json:"up_to"`
		Differing []string `json:"differing"`
	}
	json.Unmarshal(m.Data, &rep)
	fmt.Printf("chaos: projection vs rebuild from %d events: %d documents, %d differ %v\n", rep.UpTo, rep.Keys, len(rep.Differing), rep.Differing)
	if rep.Keys == 0 || len(rep.Differing) != 0 {
		t.Errorf("projection differs from a rebuild: %v", rep.Differing)
	}
	verdict := "PASS"
	if t.Failed() {
		verdict = "FAIL"
	}
	fmt.Printf("chaos: %d kills/restarts; verdict %s\n", len(kills), verdict)
}
