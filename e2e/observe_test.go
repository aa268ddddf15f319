package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/metricsserve"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// discover does what `nats micro ls|info|stats` do: a request on
// $SRV.<verb>[.<name>] that every instance answers; it gathers the
// answers for a while.
func discover(t *testing.T, nc *nats.Conn, subject string, want int) []json.RawMessage {
	t.Helper()
	inbox := nc.NewRespInbox()
	sub, err := nc.SubscribeSync(inbox)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sub.Unsubscribe() }()
	// Raw, not the gantry client: this tests the micro protocol on the bus.
	if err := nc.PublishRequest(subject, inbox, nil); err != nil {
		t.Fatal(err)
	}
	var out []json.RawMessage
	wait := 5 * time.Second // for the first want answers; then a little for more
	for {
		m, err := sub.NextMsg(wait)
		if err != nil {
			return out
		}
		out = append(out, m.Data)
		if len(out) >= want {
			wait = 300 * time.Millisecond
		}
	}
}

// status asks a service's status endpoint.
func statusOf[T any](t *testing.T, cl *client.Client, id events.Identity) T {
	t.Helper()
	v, err := tryStatus[T](cl, id)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// tryStatus asks a service's status endpoint once: an error while the
// service has not started yet (no responders), or a reply that says one.
func tryStatus[T any](cl *client.Client, id events.Identity) (T, error) {
	var v T
	if err := cl.WithTimeout(5*time.Second).Request(context.Background(), events.StatusSubject(id), nil, nil, &v); err != nil {
		return v, fmt.Errorf("status.%s: %w", id, err)
	}
	return v, nil
}

// All four services are NATS micro services with this build's version:
// an operator (and a viewer) sees them as `nats micro ls/info/stats`
// would, and their status says what each is doing while a run is under
// way. A service cannot listen to another's discovery subjects.
func TestMicroServicesDiscoverable(t *testing.T) {
	s := newStack(t, stackOptions{})
	c := &dag.Composition{Name: "observed", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "slow", Server: "me", Nodes: []dag.Node{{Name: "nap", Run: "sleep 2"}},
			HealthGate: &dag.HealthGate{Check: "sleep 2", Timeout: dag.Duration(20 * time.Second), Retries: 1}}}}
	id := s.mustSubmit(c)
	s.waitFor("the executor to report the node running", 15*time.Second, func() bool {
		st, err := tryStatus[events.ExecutorStatus](s.cl, events.Executor) // it may not have started yet
		return err == nil && st.RunningNodes == 1 && st.RunningFormulas == 1 && len(st.Nodes) == 1 && st.Nodes[0].Node == "nap" && st.Nodes[0].WorkflowID == id && st.Nodes[0].Host == "me"
	})
	if st := statusOf[events.PlannerStatus](t, s.cl, events.Planner); st.WorkflowsActive != 1 {
		t.Errorf("planner status while running: %+v, want 1 workflow active", st)
	}
	s.waitFor("the health-gate to report the gate in progress", 15*time.Second, func() bool {
		st, err := tryStatus[events.HealthGateStatus](s.cl, events.HealthGate)
		return err == nil && st.GatesInProgress == 1 && len(st.Gates) == 1 && st.Gates[0].Formula == "slow" && st.Gates[0].WorkflowID == id
	})
	if doc := s.wait(id, 30*time.Second); doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("workflow %s", doc.Status)
	}
	s.waitFor("the planner to count the workflow ended", 10*time.Second, func() bool {
		return statusOf[events.PlannerStatus](t, s.cl, events.Planner).WorkflowsActive == 0
	})
	s.waitFor("the projection to catch up", 10*time.Second, func() bool {
		st := statusOf[events.StateStoreStatus](t, s.cl, events.StateStore)
		return st.Error == "" && st.AppliedSeq > 0 && st.ProjectionLag == 0 && st.StreamLastSeq == st.AppliedSeq
	})

	viewer := s.ns.Connect(events.Viewer)
	for who, nc := range map[string]*nats.Conn{"operator": s.nc, "viewer": viewer} {
		t.Run(who, func(t *testing.T) { checkDiscovery(t, nc) })
	}

	// The executor may not listen to the planner's discovery subjects.
	denied := make(chan error, 4)
	nc := s.ns.Connect(events.Executor, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) { denied <- err }))
	if _, err := nc.SubscribeSync("$SRV.INFO.gantry-planner"); err != nil {
		t.Fatal(err)
	}
	_ = nc.Flush()
	select {
	case err := <-denied:
		if !errors.Is(err, nats.ErrPermissionViolation) && !strings.Contains(strings.ToLower(err.Error()), "permissions violation") {
			t.Fatalf("executor subscribing to $SRV.INFO.gantry-planner: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the executor could listen to the planner's discovery subject")
	}
}

func checkDiscovery(t *testing.T, nc *nats.Conn) {
	names := []events.Identity{events.Planner, events.Executor, events.HealthGate, events.StateStore}
	version := buildinfo.Version()
	// nats micro ls: $SRV.INFO
	seen := map[string]micro.Info{}
	for _, raw := range discover(t, nc, "$SRV.INFO", 4) {
		var i micro.Info
		if err := json.Unmarshal(raw, &i); err != nil {
			t.Fatal(err)
		}
		seen[i.Name] = i
	}
	for _, id := range names {
		i, ok := seen[id.ServiceName()]
		if !ok {
			t.Errorf("%s missing from $SRV.INFO (got %v)", id.ServiceName(), keys(seen))
			continue
		}
		if i.Version != version || i.ID == "" || !strings.HasPrefix(i.Metadata["instance"], string(id)+"/") {
			t.Errorf("%s info: version %q (want %q), id %q, metadata %v", i.Name, i.Version, version, i.ID, i.Metadata)
		}
		status := false
		for _, e := range i.Endpoints {
			status = status || (e.Name == events.StatusEndpoint && e.Subject == events.StatusSubject(id))
		}
		if !status {
			t.Errorf("%s endpoints %+v: no status endpoint on %s", i.Name, i.Endpoints, events.StatusSubject(id))
		}
	}
	if got := discover(t, nc, "$SRV.PING", 4); len(got) < 4 {
		t.Errorf("$SRV.PING: %d answers, want 4", len(got))
	}
	// nats micro stats <name>: the status endpoint's data.
	wantFields := map[events.Identity][]string{
		events.Planner:    {"workflows_active"},
		events.Executor:   {"running_nodes", "running_formulas", "max_formulas", "nodes"},
		events.HealthGate: {"gates_in_progress", "gates"},
		events.StateStore: {"projection_lag", "applied_seq", "stream_last_seq"},
	}
	for _, id := range names {
		got := discover(t, nc, "$SRV.STATS."+id.ServiceName(), 1)
		if len(got) != 1 {
			t.Errorf("$SRV.STATS.%s: %d answers, want 1", id.ServiceName(), len(got))
			continue
		}
		var st micro.Stats
		if err := json.Unmarshal(got[0], &st); err != nil {
			t.Fatal(err)
		}
		var data map[string]json.RawMessage
		for _, e := range st.Endpoints {
			if e.Name == events.StatusEndpoint {
				_ = json.Unmarshal(e.Data, &data)
			}
		}
		for _, f := range wantFields[id] {
			if _, ok := data[f]; !ok {
				t.Errorf("%s stats: status data %v lacks %s", id.ServiceName(), data, f)
			}
		}
		if st.Version != version {
			t.Errorf("%s stats version %q, want %q", id.ServiceName(), st.Version, version)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// scrape reads /metrics: each gantry_ series ("name{labels}") and its value.
func scrape(t *testing.T, url string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, b)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(b), "\n") {
		if !strings.HasPrefix(line, "gantry_") {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			t.Fatalf("metric line %q: %v", line, err)
		}
		out[line[:i]] = v
	}
	return out
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// A run over real sshd shows in /metrics, served over HTTP as --metrics
// serves it: node and gate outcomes and durations, the workflow's outcome,
// the dispatch backlog and SSH connections; no label names a run.
func TestMetricsAfterRun(t *testing.T) {
	s := newStack(t, stackOptions{hosts: 2})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := metricsserve.Start(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + addr.String() + metricsserve.Path
	h0, h1 := s.fleet.Hosts[0], s.fleet.Hosts[1]
	c := &dag.Composition{Name: "metered", OnFailure: dag.OnFailureContinue,
		Hosts: map[string]dag.Host{"a": {Address: h0.Addr, User: s.fleet.User}, "b": {Address: h1.Addr, User: s.fleet.User}},
		Retry: &dag.RetryPolicy{MaxAttempts: 1, InitialInterval: dag.Duration(100 * time.Millisecond), MaxInterval: dag.Duration(100 * time.Millisecond), Multiplier: 1},
		Formulas: []dag.Formula{
			{ID: "a-base", Server: "a", Nodes: []dag.Node{{Name: "one", Run: "true"}, {Name: "two", Run: "true", DependsOn: []string{"one"}}},
				HealthGate: &dag.HealthGate{Check: "true", Timeout: dag.Duration(5 * time.Second), Retries: 1}},
			{ID: "b-base", Server: "b", Nodes: []dag.Node{{Name: "three", Run: "true"}, {Name: "broken", Run: "echo no >&2; exit 3"}}},
		}}
	before := scrape(t, url)
	id := s.mustSubmit(c)
	if doc := s.wait(id, 60*time.Second); doc.Status != dag.WorkflowFailed {
		t.Fatalf("workflow %s, want failed (one node fails)", doc.Status)
	}
	want := map[string]float64{
		`gantry_node_results_total{operation="create",status="succeeded"}`: 3,
		`gantry_node_results_total{operation="create",status="failed"}`:    1,
		`gantry_node_duration_seconds_count{status="succeeded"}`:           3,
		`gantry_node_duration_seconds_count{status="failed"}`:              1,
		`gantry_gate_results_total{status="pass"}`:                         1,
		`gantry_gate_duration_seconds_count{status="pass"}`:                1,
		`gantry_workflow_results_total{status="failed"}`:                   1,
		// the executor's pool dials a and b, the health-gate's a
		`gantry_ssh_dials_total{result="ok"}`: 3,
	}
	var after map[string]float64
	var diff []string
	deadline := time.Now().Add(15 * time.Second)
	for {
		after, diff = scrape(t, url), nil
		for series, n := range want {
			if got := after[series] - before[series]; got != n {
				diff = append(diff, fmt.Sprintf("%s +%g, want +%g", series, got, n))
			}
		}
		if len(diff) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, d := range diff {
		t.Error(d)
	}
	for _, series := range []string{
		`gantry_ssh_connections_open`,
		`gantry_consumer_pending_messages{consumer="executor",stream="GANTRY_DISPATCH"}`,
		`gantry_consumer_ack_pending_messages{consumer="health-gate",stream="GANTRY_GATES"}`,
		`gantry_consumer_pending_messages{consumer="planner",stream="GANTRY_EVENTS"}`,
		`gantry_projection_lag_events`,
		`gantry_workflows_active`,
		`gantry_nodes_running`,
		`gantry_gates_in_progress`,
	} {
		if _, ok := after[series]; !ok {
			t.Errorf("no series %s", series)
		}
	}
	if after[`gantry_ssh_connections_open`]-before[`gantry_ssh_connections_open`] != 3 {
		t.Errorf("gantry_ssh_connections_open +%g, want +3: the pooled connections stay open", after[`gantry_ssh_connections_open`]-before[`gantry_ssh_connections_open`])
	}
	for series := range after {
		if strings.Contains(series, id) || uuidRE.MatchString(series) || strings.Contains(series, "host=") || strings.Contains(series, "node=") || strings.Contains(series, "workflow") && strings.Contains(series, "{workflow") {
			t.Errorf("series %s names a run, host or node", series)
		}
	}
}
