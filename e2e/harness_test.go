package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/devstack"
	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	"github.com/gantry-dev/gantry/pkg/natsconn"
	"github.com/gantry-dev/gantry/pkg/natsembed"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/gantry-dev/gantry/pkg/tracing"
	executor "github.com/gantry-dev/gantry/services/executor/service"
	healthgate "github.com/gantry-dev/gantry/services/health-gate/service"
	plannersvc "github.com/gantry-dev/gantry/services/planner/service"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// stack is an embedded NATS server with the four services in process,
// and a fleet of real sshd hosts on 127.0.0.1.
type stack struct {
	t     *testing.T
	ns    *natstest.Server
	nc    *nats.Conn
	cl    *client.Client // the gantry client over nc: how tests ask the services
	js    jetstream.JetStream
	fleet *sshtest.Fleet
	logs  string
	// stopServices cancels the services' context, as SIGINT does, and
	// says how long they took to stop (at most within; then it fails the
	// test). The test's end does it when the test did not.
	stopServices func(within time.Duration) time.Duration
}

type stackOptions struct {
	hosts      int
	knownHosts func(f *sshtest.Fleet) string // default: the fleet's own
	// tls runs the server with TLS required and client certificates
	// verified, and every connection over it.
	tls *testPKI
	// operatorMode runs the server in operator mode (user JWTs, creds files).
	operatorMode bool
	// refuseLocal starts the workers without --allow-local.
	refuseLocal bool
	// secretsDir is the workers' --secrets-dir.
	secretsDir string
	// filesDir is the executors' --files-dir.
	filesDir string
	// ssh are the fleet's options (listen addresses, sshd logs).
	ssh sshtest.Options
	// executors are started besides the stack's own, each on its own
	// connection; perHost and maxFormulas apply to all.
	executors   []devstack.ExecutorOptions
	perHost     int
	maxFormulas int
	// tracer gives the services their span recorders (none when nil).
	tracer func(service string) *tracing.Tracer
	// planners are more planner replicas, by name, each on its own
	// connection.
	planners []string
	// connectTimeout is the workers' --ssh-connect-timeout (default 15s).
	connectTimeout time.Duration
	// keepalive is the workers' --ssh-keepalive (default 15s).
	keepalive time.Duration
	// unclaimedAfter is the planner's --unclaimed-after (default 30s).
	unclaimedAfter time.Duration
	// retention is the planner's retention setting (zero: off).
	retention plannersvc.Retention
}

func newStack(t *testing.T, o stackOptions) *stack {
	t.Helper()
	s := &stack{t: t}
	if o.hosts > 0 {
		s.fleet = sshtest.Start(t, o.hosts, o.ssh)
	}
	var err error
	conn := natsconn.Options{}
	var clientTLS []nats.Option
	if o.tls != nil {
		s.ns = natstest.StartWith(t, natsembed.Config{TLS: &natsembed.TLS{Cert: o.tls.serverCert, Key: o.tls.serverKey, CA: o.tls.ca, VerifyClients: true}})
		conn = natsconn.Options{CA: o.tls.ca, Cert: o.tls.clientCert, Key: o.tls.clientKey}
		clientTLS = []nats.Option{nats.RootCAs(o.tls.ca), nats.ClientCert(o.tls.clientCert, o.tls.clientKey)}
	} else {
		s.ns = natstest.StartWith(t, natsembed.Config{OperatorMode: o.operatorMode})
	}
	conn.URL = s.ns.URL()
	s.logs = filepath.Join(t.TempDir(), "services.log")
	lf, err := os.Create(s.logs)
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewJSONHandler(lf, nil))
	var ssh sshexec.SSHConfig
	if s.fleet != nil {
		ssh = sshexec.SSHConfig{KeyFile: s.fleet.KeyFile, KnownHosts: s.fleet.KnownHosts, DefaultUser: s.fleet.User}
		if o.knownHosts != nil {
			ssh.KnownHosts = o.knownHosts(s.fleet)
		}
	} else {
		ssh = sshexec.SSHConfig{KeyFile: "/nonexistent"} // local transport only
	}
	ssh.ConnectTimeout = o.connectTimeout
	ssh.Keepalive = o.keepalive
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1+len(o.executors)+len(o.planners))
	hosts := transport.HostsConfig{SSH: ssh, AllowLocal: !o.refuseLocal, Worker: localexec.WorkerEnvOf(os.LookupEnv)}
	dcfg := devstack.Config{Conn: conn, Keys: s.ns.Keys, Log: log, Tracer: o.tracer,
		Planner:    plannersvc.Config{Retention: o.retention, UnclaimedAfter: o.unclaimedAfter},
		Executor:   executor.Config{Hosts: hosts, SecretsDir: o.secretsDir, FilesDir: o.filesDir, PerHost: o.perHost, MaxFormulas: o.maxFormulas},
		HealthGate: healthgate.Config{Hosts: hosts, SecretsDir: o.secretsDir}}
	go func() { done <- devstack.Run(ctx, dcfg) }()
	for _, eo := range o.executors {
		go func() { done <- devstack.RunExecutor(ctx, dcfg, eo) }()
	}
	for _, name := range o.planners {
		go func() { done <- devstack.RunPlanner(ctx, dcfg, name) }()
	}
	// Requests as an operator would make them; streams and buckets are
	// looked at as an administrator.
	s.nc = s.ns.Connect(events.Operator, clientTLS...)
	s.cl = client.New(s.nc, 10*time.Second)
	s.js, _ = jetstream.New(s.ns.Connect(busauth.Admin, clientTLS...))
	var stopOnce sync.Once
	s.stopServices = func(within time.Duration) time.Duration {
		var took time.Duration
		stopOnce.Do(func() {
			start := time.Now()
			cancel()
			deadline := time.After(within)
			for range 1 + len(o.executors) + len(o.planners) {
				select {
				case err := <-done:
					if err != nil {
						t.Errorf("services stopped with: %v", err)
					}
				case <-deadline:
					t.Errorf("services did not stop within %s", within)
					return
				}
			}
			took = time.Since(start)
		})
		return took
	}
	t.Cleanup(func() {
		s.stopServices(30 * time.Second)
		lf.Close()
		if t.Failed() {
			b, _ := os.ReadFile(s.logs)
			t.Logf("service logs:\n%s", tail(string(b), 6000))
		}
	})
	// ready when both micro services answer (an error reply is an answer)
	deadline := time.Now().Add(15 * time.Second)
	ready := s.cl.WithTimeout(time.Second)
	for {
		_, e1 := ready.Validate(context.Background(), []byte("{}"))
		_, e2 := ready.List(context.Background(), 0)
		if answered(e1) && answered(e2) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("services not answering: %v / %v", e1, e2)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s
}

// answered says whether a request got the service's answer: a reply, or
// the service's error reply (*client.ServiceError).
func answered(err error) bool {
	var se *client.ServiceError
	return err == nil || errors.As(err, &se)
}

// failure describes a failed request for a test's message: a service's
// error reply with its code and the body it came with.
func failure(err error) string {
	var se *client.ServiceError
	if errors.As(err, &se) {
		return fmt.Sprintf("%s %s %s", se.Code, se.Description, se.Body)
	}
	return err.Error()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// submit sends a composition; it returns the reply and the micro error
// code ("" when accepted). It waits as long as the planner may take: a
// publish that finds its stream deleted is tried again after 5 s.
func (s *stack) submit(doc []byte) (events.SubmitReply, string) {
	s.t.Helper()
	r, err := s.cl.WithTimeout(35*time.Second).Submit(context.Background(), doc, nil)
	var se *client.ServiceError
	if errors.As(err, &se) {
		rejected, ok := client.Rejected(err)
		if !ok {
			s.t.Fatalf("submit reply %q: %s %s", se.Body, se.Code, se.Description)
		}
		return rejected, se.Code
	}
	if err != nil {
		s.t.Fatalf("submit: %v", err)
	}
	return r, ""
}

func (s *stack) mustSubmit(c *dag.Composition) string {
	s.t.Helper()
	b, _ := json.Marshal(c)
	r, code := s.submit(b)
	if code != "" || r.Status != "accepted" {
		s.t.Fatalf("submit rejected (%s): %v", code, r.Errors)
	}
	return r.WorkflowID
}

// wait polls state.workflow until the workflow ends.
func (s *stack) wait(id string, timeout time.Duration) *events.WorkflowDoc {
	s.t.Helper()
	return s.waitGen(id, 1, timeout)
}

// waitGen polls state.workflow until generation gen (or a later one) of
// the workflow ends: after a retry, the projection shows the previous
// generation's end until it has applied the retry's first event.
func (s *stack) waitGen(id string, gen int, timeout time.Duration) *events.WorkflowDoc {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		d, err := s.cl.WithTimeout(5*time.Second).Status(context.Background(), id)
		if err == nil && d.Status.Terminal() && d.Generation >= gen {
			return d
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("workflow %s did not end within %s", id, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stateCaughtUp says whether the state-store's checkpoint has reached the
// last event in the stream.
//
// stateCheckpointKey is the state-store's checkpoint in gantry_state
// (project.CheckpointKey, internal to the state-store).
const stateCheckpointKey = "meta.applied"

func stateCaughtUp(js jetstream.JetStream) bool {
	ctx := context.Background()
	str, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return false
	}
	kv, err := js.KeyValue(ctx, events.BucketState)
	if err != nil {
		return false
	}
	e, err := kv.Get(ctx, stateCheckpointKey)
	if err != nil {
		return false
	}
	seq, err := strconv.ParseUint(string(e.Value()), 10, 64)
	return err == nil && seq >= str.CachedInfo().State.LastSeq
}

// evt is one event of a workflow, in stream order.
type evt struct {
	typ     events.Type
	formula string
	node    string
	status  string
	attempt int
	blocker string
	retry   bool
	err     string
	reason  string
	started time.Time // of a node attempt or health check
	ended   time.Time
	actor   string // the executor instance of a node event
}

func (e evt) String() string {
	return fmt.Sprintf("%s %s/%s %s", e.typ, e.formula, e.node, e.status)
}

// events reads every event of a workflow from the stream, in order.
func (s *stack) events(id string) []evt {
	s.t.Helper()
	var out []evt
	s.workflowEnvelopes(events.StreamEvents, id, func(env *events.Envelope) {
		var d struct {
			Formula   string    `json:"formula"`
			Node      string    `json:"node"`
			Status    string    `json:"status"`
			Attempt   int       `json:"attempt"`
			Blocker   string    `json:"blocker"`
			WillRetry bool      `json:"will_retry"`
			Final     bool      `json:"final"`
			Error     string    `json:"error"`
			Reason    string    `json:"reason"`
			Actor     string    `json:"actor"`
			StartedAt time.Time `json:"started_at"`
			EndedAt   time.Time `json:"ended_at"`
		}
		json.Unmarshal(env.Data, &d)
		if env.Type.Family() == events.FamilyHealth && !d.Final {
			d.Status = "attempt-" + d.Status
		}
		out = append(out, evt{env.Type, d.Formula, d.Node, d.Status, d.Attempt, d.Blocker, d.WillRetry, d.Error, d.Reason, d.StartedAt, d.EndedAt, d.Actor})
	})
	return out
}

// workflowEnvelopes hands over every message of a workflow in stream, in
// order.
func (s *stack) workflowEnvelopes(stream, id string, each func(*events.Envelope)) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cons, err := s.js.OrderedConsumer(ctx, stream, jetstream.OrderedConsumerConfig{})
	if err != nil {
		s.t.Fatal(err)
	}
	for {
		batch, err := cons.FetchNoWait(500)
		if err != nil {
			s.t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := events.Parse(m.Data())
			if err != nil {
				s.t.Fatalf("bad message in %s: %v", stream, err)
			}
			if strings.HasPrefix(env.Subject, id) {
				each(env)
			}
		}
		if n == 0 {
			return
		}
	}
}

// index finds the first event matching family, formula, node and status.
func index(evs []evt, family, formula, node, status string) int {
	for i, e := range evs {
		if e.typ.Family() == family && e.formula == formula && e.node == node && e.status == status {
			return i
		}
	}
	return -1
}

// k8sOnFleet is examples/kubernetes.yaml aimed at the fleet: the same
// formulas, dependencies, gates and parallelism, with every command
// replaced by one that appends "<formula>/<node>" to the host's marker
// file (the workers' join only once they read the join command the
// control plane's kubeadm-init hands on), and every gate checking that
// its formula's markers are there.
func k8sOnFleet(t *testing.T, f *sshtest.Fleet) (*dag.Composition, map[string]*sshtest.Host) {
	t.Helper()
	c, err := composition.LoadFile("../examples/kubernetes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	hosts := map[string]*sshtest.Host{"cp-0": f.Hosts[0], "worker-0": f.Hosts[1], "worker-1": f.Hosts[2]}
	for name, h := range hosts {
		c.Hosts[name] = dag.Host{Transport: dag.TransportSSH, Address: h.Addr, User: f.User}
	}
	c.Retry = &dag.RetryPolicy{MaxAttempts: 2, InitialInterval: dag.Duration(100 * time.Millisecond), MaxInterval: dag.Duration(time.Second), Multiplier: 2}
	for i := range c.Formulas {
		fm := &c.Formulas[i]
		markers := hosts[fm.Server].Dir + "/markers"
		for j := range fm.Nodes {
			n := &fm.Nodes[j]
			reads := n.Run // kubeadm-join's: the join command kubeadm-init hands on
			n.Run = fmt.Sprintf("echo %s/%s >> %s", fm.ID, n.Name, markers)
			switch {
			case len(n.Outputs) > 0:
				n.Run += `; echo "join_cmd=echo joined" >> "$GANTRY_OUTPUT"`
			case dag.HasOutputs(reads):
				n.Run = fmt.Sprintf(`[ "$(%s)" = joined ] && %s`, reads, n.Run)
			}
			n.Check = ""
			n.Delete = fmt.Sprintf("echo delete %s/%s >> %s", fm.ID, n.Name, markers)
			n.Env = map[string]dag.EnvValue{"GANTRY_TEST": dag.Text("1")}
		}
		if fm.HealthGate != nil {
			fm.HealthGate = &dag.HealthGate{Check: fmt.Sprintf("grep -q '^%s/' %s", fm.ID, markers), Timeout: dag.Duration(5 * time.Second), Retries: 3}
		}
	}
	return c, hosts
}

// markers reads a host's marker file: how often each line appears.
func markers(t *testing.T, h *sshtest.Host) map[string]int {
	t.Helper()
	b, err := os.ReadFile(h.Dir + "/markers")
	if os.IsNotExist(err) {
		return map[string]int{}
	}
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]int{}
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		if l != "" {
			m[l]++
		}
	}
	return m
}

// decodeReply decodes a reply's JSON body, compressed (a large plan or
// document) or not.
func decodeReply(msg *nats.Msg, v any) error {
	body, err := eventbus.BodyOf(msg)
	if err != nil {
		return err
	}
	return json.Unmarshal(body, v)
}
