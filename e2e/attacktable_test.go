package e2e

import (
	"bufio"
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// The attack table: what a stolen service credential can do with events.
//
// For each service identity but the planner, the test connects as that
// identity and, for every event type of the origin table, publishes the
// type on every subject the identity may publish to (events.Uses) and on
// the subject its type travels on, about the victim's host (or workflow)
// and about another one: (a) each with a fresh message id, and (b) each
// with the logical id an event of its type about the victim would have
// and those of the victim's real future events (a/n failed, a failed, b
// and b/m blocked, the workflow failed), as the executor
// (formula.msgID) and the planner (engine.msgID) build them. A row has a
// victim workflow for (a) and one for (b), each attacked while its formula
// a runs on h1: unattacked, a fails, b (on h2, after a, condition
// completed) is blocked, the workflow FAILED (the test checks so on a
// control victim). After the attack the test checks that this is still
// what happened: the planner's verdict (on workflow.<id>.lifecycle, where
// only the planner may publish), the state-store's state.workflow (a and
// a/n failed, b and b/m blocked), that b never ran and that no forged work
// ran, that gantry watch exits non-zero, that gantry logs prints no forged
// line, and that submitting the composition again runs a's node rather
// than skipping it (the last three where something was stored at all).
//
// Each row is "refused by the server" (every publish refused for
// permissions), "stored, refused by consumers" (each stored event is
// named by a consumer's security log line, or is a log line gantry logs
// does not print), "stored, admitted by consumers, outcome unchanged"
// (some passed events.Admit, as the types a subject kind allows from its
// publishers do, and changed nothing), "stored, shown by gantry logs,
// outcome unchanged", or "stored, applied" (the outcome changed; a run
// that never ends is a changed outcome): the test fails on the last.
//
// The planner is out of scope: it is the decider; a stolen planner
// credential decides whatever it likes, by design. The KV buckets an
// identity may write (the executor's node records, the state-store's
// projection) are out of scope too: this table is about events
// (TestStolenStateStoreCredentialDecidesNothing covers the projection).
//
// The executor reports the outcome of the work dispatched to it: what it
// publishes, of the types it produces, about the victim formula's own host
// on that host's subject of the type's kind is the trust its identity has
// by design. Those attempts go to victims of their own ("own-host"),
// reported as "by design: the executor reports what it runs" and not
// asserted; every other attempt of an executor row must change nothing.
// At least one of those must change the outcome (a formula.succeeded
// does): otherwise the checks could not see a change at all.

// attackType is a row of the origin table: an event type, the kind of
// subject it travels on (its pattern) and who produces it.
type attackType struct {
	typ     events.Type
	pattern string // the subject pattern of its kind
	by      []events.Identity
}

// attackTypes is the origin table (pkg/events/provenance.go), written out
// so the same rows can be played against code that had none.
func attackTypes() []attackType {
	pl, ex, hg := []events.Identity{events.Planner}, []events.Identity{events.Executor}, []events.Identity{events.HealthGate}
	both := []events.Identity{events.Planner, events.Executor}
	var out []attackType
	for _, s := range []dag.WorkflowState{dag.WorkflowAccepted, dag.WorkflowRunning, dag.WorkflowPaused, dag.WorkflowSucceeded, dag.WorkflowFailed, dag.WorkflowCancelled} {
		out = append(out, attackType{events.WorkflowType(s), events.AllWorkflowLifecycle, pl})
	}
	for _, s := range []dag.FormulaState{dag.FormulaReady, dag.FormulaGating, dag.FormulaHealthy, dag.FormulaUnhealthy, dag.FormulaBlocked} {
		out = append(out, attackType{events.FormulaType(s), events.AllHostLifecycle, pl})
	}
	for _, s := range []dag.FormulaState{dag.FormulaRunning, dag.FormulaSucceeded} {
		out = append(out, attackType{events.FormulaType(s), events.AllHostLifecycle, ex})
	}
	// A formula's failure is an executor's, or the planner's when a
	// timeout passed and no executor reported it.
	out = append(out, attackType{events.FormulaType(dag.FormulaFailed), events.AllHostLifecycle, []events.Identity{events.Executor, events.Planner}})
	out = append(out, attackType{events.FormulaType(dag.FormulaCancelled), events.AllHostLifecycle, both})
	for _, s := range []dag.NodeState{dag.NodeRunning, dag.NodeSucceeded, dag.NodeFailed, dag.NodeSkipped} {
		out = append(out, attackType{events.NodeType(s), events.AllHostLifecycle, ex})
	}
	for _, s := range []dag.NodeState{dag.NodeBlocked, dag.NodeCancelled} {
		out = append(out, attackType{events.NodeType(s), events.AllHostLifecycle, both})
	}
	for _, ty := range []events.Type{events.TypeRolloutBatchStarted, events.TypeRolloutBatchFinished, events.TypeRolloutStopped} {
		out = append(out, attackType{ty, events.AllWorkflowLifecycle, pl})
	}
	out = append(out,
		attackType{events.TypeProgressUpdate, events.AllHostLifecycle, ex},
		attackType{events.TypeHealthAttempt, events.AllHealth, hg},
		attackType{events.TypeHealthPassed, events.AllHealth, hg},
		attackType{events.TypeHealthFailed, events.AllHealth, hg},
		attackType{events.TypeLogLine, events.AllLogs, ex},
		attackType{events.TypeDispatch, events.AllDispatch, pl},
		attackType{events.TypeGateRequest, events.AllGate, pl},
	)
	return out
}

// checkOriginTable: the table above is events.OriginOf, every type of it.
func checkOriginTable(t *testing.T, types []attackType) {
	t.Helper()
	kinds := map[string]events.Kind{events.AllWorkflowLifecycle: events.KindWorkflowLifecycle, events.AllHostLifecycle: events.KindHostLifecycle,
		events.AllHealth: events.KindHealth, events.AllLogs: events.KindLogs, events.AllDispatch: events.KindDispatch, events.AllGate: events.KindGate}
	var all []events.Type
	for _, s := range []dag.WorkflowState{dag.WorkflowAccepted, dag.WorkflowRunning, dag.WorkflowPaused, dag.WorkflowSucceeded, dag.WorkflowFailed, dag.WorkflowCancelled} {
		all = append(all, events.WorkflowType(s))
	}
	for _, s := range []dag.FormulaState{dag.FormulaPending, dag.FormulaReady, dag.FormulaRunning, dag.FormulaSucceeded, dag.FormulaGating, dag.FormulaHealthy, dag.FormulaUnhealthy, dag.FormulaFailed, dag.FormulaBlocked, dag.FormulaCancelled} {
		all = append(all, events.FormulaType(s))
	}
	for _, s := range []dag.NodeState{dag.NodePending, dag.NodeRunning, dag.NodeSucceeded, dag.NodeFailed, dag.NodeSkipped, dag.NodeBlocked, dag.NodeCancelled} {
		all = append(all, events.NodeType(s))
	}
	all = append(all, events.TypeHealthAttempt, events.TypeHealthPassed, events.TypeHealthFailed, events.TypeLogLine, events.TypeDispatch, events.TypeGateRequest,
		events.TypeRolloutBatchStarted, events.TypeRolloutBatchFinished, events.TypeRolloutStopped, events.TypeProgressUpdate)
	rows := map[events.Type]attackType{}
	for _, at := range types {
		rows[at.typ] = at
	}
	for _, ty := range all {
		o, ok := events.OriginOf(ty)
		at, listed := rows[ty]
		switch {
		case ok != listed:
			t.Fatalf("%s: in the origin table %v, in the attack table %v", ty, ok, listed)
		case ok && (kinds[at.pattern] != o.Kind || !slices.Equal(at.by, o.By)):
			t.Fatalf("%s: origin %s %v, the attack table says %s %v", ty, o.Kind, o.By, at.pattern, at.by)
		}
	}
}

// The results of a row.
const (
	resRefused     = "refused by the server"
	resConsumers   = "stored, refused by consumers"
	resAdmitted    = "stored, admitted by consumers, outcome unchanged"
	resApplied     = "stored, applied"
	resShown       = "stored, shown (gantry logs, state.host), outcome unchanged"
	resByDesign    = "by design: the executor reports what it runs"
	forgedMark     = "/forged-" // in the source of every forged event
	attackHold     = 60         // the longest a's node waits for the release, in seconds
	attackPerVerb  = 8          // CLI runs and submits at once
	attackVerdicts = 25 * time.Second
)

// The two ways of taking message ids, each against a victim of its own so
// that what each does is told apart.
const (
	idFresh   = 0 // (a) a fresh id
	idLogical = 1 // (b) the logical ids of the victim's real events
)

var idKinds = [2]string{"(a) fresh id", "(b) logical ids"}

type attackRow struct {
	who  events.Identity
	at   attackType
	v    [2]*attackVictim // every attempt that must change nothing, by id kind
	own  [2]*attackVictim // the executor's own reports (by design), or nil
	name string
}

// addResults files a row's victims under their results ("label (result)"
// with a label), one entry when both id kinds had the same.
func addResults(results map[string][]string, label, name string, vs [2]*attackVictim) {
	key := func(res string) string {
		if label == "" {
			return res
		}
		return label + " (" + res + ")"
	}
	a, b := vs[idFresh].judgeRow(), vs[idLogical].judgeRow()
	if a == b {
		results[key(a)] = append(results[key(a)], name+" (a)(b)")
		return
	}
	results[key(a)] = append(results[key(a)], name+" (a)")
	results[key(b)] = append(results[key(b)], name+" (b)")
}

type attackVictim struct {
	idx      int
	row      *attackRow
	comp     *dag.Composition
	id       string // workflow id of the first run
	other    string // another workflow's id, for forged workflow subjects
	second   string // workflow id of the later submit
	markerB  string // b's node touches it
	pwned    string // a forged dispatch or gate touches it
	specHash string // a/n's, from its running event
	actor    string
	attempts []*attackAttempt

	// what happened
	verdict      dag.WorkflowState // the planner's, on workflow.<id>.lifecycle
	bRan         bool              // in the first run
	pwnedRan     bool
	doc          *events.WorkflowDoc
	watchCode    int
	watchOut     string
	logsOut      string
	secondNode   dag.NodeState
	secondStatus dag.WorkflowState
	changed      []string          // how the outcome differs from the truth
	shown        []string          // forged lines gantry logs printed, forged nodes state.host lists
	hostNodes    []events.HostNode // state.host's nodes of the composition, on h1 and h2
	submitErr    error
	told         bool // something was stored: watch, logs and the next submit are run
	watched      bool // something was stored in the event stream: gantry watch is run
}

type attackAttempt struct {
	subject, variant, idLabel, msgID, source string
	data                                     []byte
	result                                   string // resRefused, "stored", "duplicate" or an error
	stream                                   string
	refusedBy                                map[string]bool
}

// TestAttackTable plays the attack table (see above) against one stack and
// prints it.
func TestAttackTable(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Second)
	defer cancel()
	start := time.Now()
	types := attackTypes()
	checkOriginTable(t, types)
	bin := buildGantry(t)
	s := newStack(t, stackOptions{perHost: 512, maxFormulas: 512})
	dir := t.TempDir()
	release := filepath.Join(dir, "release")
	// However the test ends, the nodes waiting for the release end before
	// the services stop.
	t.Cleanup(func() { _ = os.WriteFile(release, nil, 0o644) })
	nonce := strconv.FormatInt(time.Now().UnixNano()%(1<<40), 36) // the host lock is per composition, machine-wide

	var victims []*attackVictim
	newVictim := func(r *attackRow) *attackVictim {
		v := &attackVictim{idx: len(victims), row: r, other: randomUUID()}
		v.markerB = filepath.Join(dir, fmt.Sprintf("b-ran-%d", v.idx))
		v.pwned = filepath.Join(dir, fmt.Sprintf("pwned-%d", v.idx))
		hold := fmt.Sprintf("sleep 3; i=0; while [ ! -e %s ] && [ $i -lt %d ]; do sleep 1; i=$((i+1)); done; exit 1", release, attackHold)
		v.comp = &dag.Composition{Name: fmt.Sprintf("attack-%s-%d", nonce, v.idx), Retry: &dag.RetryPolicy{MaxAttempts: 1},
			Hosts: map[string]dag.Host{"h1": {Transport: dag.TransportLocal}, "h2": {Transport: dag.TransportLocal}},
			Formulas: []dag.Formula{
				{ID: "a", Server: "h1", Nodes: []dag.Node{{Name: "n", Run: hold}}},
				{ID: "b", Server: "h2", DependsOn: []dag.FormulaDep{{Formula: "a", Condition: dag.ConditionCompleted}}, Nodes: []dag.Node{{Name: "m", Run: "touch " + v.markerB}}},
			}}
		victims = append(victims, v)
		return v
	}
	control := newVictim(nil) // attacked by nobody: the truth
	var rows []*attackRow
	for _, who := range []events.Identity{events.HealthGate, events.StateStore, events.Executor} {
		for _, at := range types {
			r := &attackRow{who: who, at: at, name: string(who) + "/" + string(at.typ)}
			for k := range idKinds {
				r.v[k] = newVictim(r)
				if who == events.Executor && slices.Contains(at.by, events.Executor) {
					r.own[k] = newVictim(r)
				}
			}
			rows = append(rows, r)
		}
	}

	// What the services say, live: a's node running (its spec hash, for
	// the forged node events) and the planner's verdicts.
	obs := newAttackObserver(t, s)

	// Every victim submitted; a's node running in each.
	submitted := time.Now()
	parallel(len(victims), attackPerVerb, func(i int) {
		victims[i].id, victims[i].submitErr = submitComposition(s, victims[i].comp)
	})
	for _, v := range victims {
		if v.id == "" {
			t.Fatalf("victim %d not submitted: %v", v.idx, v.submitErr)
		}
	}
	if !waitUntil(ctx, 60*time.Second, func() bool { return obs.allRunning(victims) }) {
		t.Fatalf("a's node is not running in every victim after 60s")
	}
	for _, v := range victims {
		v.specHash, v.actor = obs.runningOf(v.id)
	}
	t.Logf("%d victims submitted and running in %s", len(victims), time.Since(submitted).Round(time.Millisecond))

	// The attack: each identity on its own connection, every row's
	// attempts in order, the rows at once.
	attackers := map[events.Identity]*attacker{}
	for _, who := range []events.Identity{events.HealthGate, events.StateStore, events.Executor} {
		attackers[who] = newAttacker(t, s, who)
	}
	for _, r := range rows {
		buildAttempts(r)
	}
	attackStart := time.Now()
	var wg sync.WaitGroup
	for _, v := range victims[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a := attackers[v.row.who]
			for _, at := range v.attempts {
				at.result, at.stream = a.publish(ctx, at.subject, at.data, at.msgID)
			}
		}()
	}
	wg.Wait()
	nAttempts := 0
	for _, v := range victims {
		nAttempts += len(v.attempts)
	}
	t.Logf("%d attempts published in %s", nAttempts, time.Since(attackStart).Round(time.Millisecond))
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}

	// The first runs end (or do not: a wedged run is a changed outcome).
	phase := time.Now()
	ended := waitUntil(ctx, attackVerdicts, func() bool { return obs.allEnded(victims, func(v *attackVictim) string { return v.id }) })
	caught := waitUntil(ctx, 20*time.Second, func() bool { return stateCaughtUp(s.js) })
	t.Logf("first runs ended: %v, state caught up: %v, in %s", ended, caught, time.Since(phase).Round(time.Millisecond))
	phase = time.Now()
	hist := readEventHistory(t, s)
	// The per-host projection (state.host) of every victim's composition.
	for _, h := range []string{"h1", "h2"} {
		nodes, err := stateHost(s, h)
		if err != nil {
			t.Fatalf("state.host %s: %v", h, err)
		}
		byName := map[string]*attackVictim{}
		for _, v := range victims {
			byName[v.comp.Name] = v
		}
		for _, n := range nodes {
			if v := byName[n.Workflow]; v != nil {
				v.hostNodes = append(v.hostNodes, n)
			}
		}
	}
	// The victims the bus was told anything about: watch, logs and the
	// next submit read the bus, so where nothing was stored they see what
	// they would have seen unattacked, and are not run (the control's are).
	var told []*attackVictim
	for _, v := range victims {
		v.told = v == control || slices.ContainsFunc(v.attempts, func(at *attackAttempt) bool { return at.result == "stored" })
		if v.told {
			told = append(told, v)
		}
	}
	parallel(len(victims), attackPerVerb, func(i int) {
		v := victims[i]
		v.verdict = hist.verdict[v.id]
		v.doc, _ = stateDoc(s, v.id)
		_, err := os.Stat(v.markerB)
		v.bRan = err == nil
		_, err = os.Stat(v.pwned)
		v.pwnedRan = err == nil
	})
	// Submitted again: a's node runs, not skipped on a forged success.
	parallel(len(told), attackPerVerb, func(i int) {
		v := told[i]
		v.second, v.submitErr = submitComposition(s, v.comp)
	})
	// Meanwhile, what gantry watch and gantry logs make of the first runs.
	parallel(len(told), attackPerVerb, func(i int) {
		v := told[i]
		if v == control || v.storedIn(events.StreamEvents) { // what watch reads
			v.watched = true
			v.watchCode, v.watchOut = runCLI(ctx, bin, s, "watch", v.id, "--timeout", "3s")
		}
		if v.storedIn(events.StreamLogs) {
			_, v.logsOut = runCLI(ctx, bin, s, "logs", v.id)
		}
	})
	t.Logf("%d victims told something: submitted again, watched and logs read in %s", len(told), time.Since(phase).Round(time.Millisecond))
	phase = time.Now()
	ended = waitUntil(ctx, attackVerdicts, func() bool { return obs.allEnded(told, func(v *attackVictim) string { return v.second }) })
	t.Logf("the runs submitted again ended: %v, in %s", ended, time.Since(phase).Round(time.Millisecond))
	parallel(len(told), attackPerVerb, func(i int) {
		v := told[i]
		if v.second == "" {
			return
		}
		v.secondStatus = obs.verdictOf(v.second)
		if d, err := stateDoc(s, v.second); err == nil && d.Formulas["a"] != nil && d.Formulas["a"].Nodes["n"] != nil {
			v.secondNode = d.Formulas["a"].Nodes["n"].Status
		}
	})

	// What the consumers refused, from the services' security log lines;
	// what was stored, from the streams.
	refusals := readRefusals(t, s.logs)
	for _, v := range victims {
		for _, at := range v.attempts {
			at.refusedBy = refusals.bySource[at.source]
			if at.result == "stored" && at.variant == "other host" && refusals.otherHost[v.id] {
				if at.refusedBy == nil {
					at.refusedBy = map[string]bool{}
				}
				at.refusedBy["planner (another host)"] = true
			}
		}
	}

	// The truth, from the victim nobody attacked.
	truth := control.judge()
	if !slices.ContainsFunc(control.hostNodes, func(n events.HostNode) bool {
		return n.Host == "h1" && n.Formula == "a" && n.Node == "n" && n.Status == dag.NodeFailed
	}) {
		truth = append(truth, fmt.Sprintf("state.host: %+v", control.hostNodes))
	}
	if len(truth)+len(control.shown) > 0 {
		truth = append(truth, control.shown...)
		t.Fatalf("the unattacked run did not end as expected (a failed, b blocked, FAILED, watch non-zero, a run again): %s", strings.Join(truth, "; "))
	}
	for _, want := range hist.controlIDs(control.id) {
		if !want.found {
			t.Errorf("the real run stored no event under the logical id %q (%s): the attack's ids are not the real ones", want.id, want.label)
		}
	}

	results := map[string][]string{} // result -> row names
	for _, who := range []events.Identity{events.HealthGate, events.StateStore, events.Executor} {
		t.Run(string(who), func(t *testing.T) {
			for _, r := range rows {
				if r.who != who {
					continue
				}
				t.Run(string(r.at.typ), func(t *testing.T) {
					addResults(results, "", r.name, r.v)
					for k, v := range r.v {
						t.Logf("%s %s: %s", r.name, idKinds[k], v.detail(v.judgeRow()))
						if len(v.changed) > 0 {
							t.Errorf("%s with %s changed the outcome: %s", r.name, idKinds[k], strings.Join(v.changed, "; "))
						}
					}
					if r.own[0] == nil {
						return
					}
					t.Run("own-host", func(t *testing.T) {
						addResults(results, resByDesign, r.name+" (own host)", r.own)
						for k, v := range r.own {
							t.Logf("%s on its own host, %s: %s", r.name, idKinds[k], v.detail(v.judgeRow()))
						}
					})
				})
			}
		})
	}
	applied := 0
	for res, names := range results {
		if strings.HasPrefix(res, resByDesign+" ("+resApplied) {
			applied += len(names)
		}
	}
	if applied == 0 {
		t.Errorf("no row changed the outcome, not even the executor's own reports, which it may make: the checks see nothing")
	}

	var b strings.Builder
	fmt.Fprintf(&b, "attack table (%d rows, %d victim runs, %d attempts, %s); (a) fresh id, (b) the logical ids of the victim's real events:\n",
		len(rows), len(victims), nAttempts, time.Since(start).Round(time.Second))
	var keys []string
	for k := range results {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(&b, "== %s (%d)\n", k, len(results[k]))
		for _, n := range results[k] {
			fmt.Fprintf(&b, "   %s\n", n)
		}
	}
	fmt.Fprintf(&b, "per row:\n")
	for _, r := range rows {
		for k, v := range r.v {
			fmt.Fprintf(&b, "%-42s %s %s\n", r.name, idKinds[k][:3], v.detail(v.judgeRow()))
		}
		for k, v := range r.own {
			if v != nil {
				fmt.Fprintf(&b, "%-42s %s %s: %s\n", r.name+" (own host)", idKinds[k][:3], resByDesign, v.detail(v.judgeRow()))
			}
		}
	}
	t.Log(b.String())
}

// buildAttempts lays out a row's attempts: every subject pattern the
// identity may publish to, and its type's own, each about the victim and
// about another host (or workflow); against one victim with a fresh id,
// against the other with the logical id of its type and those of the
// victim's real future events.
func buildAttempts(r *attackRow) {
	patterns := []string{r.at.pattern}
	for _, p := range events.Uses(r.who).Publish {
		if !slices.Contains(patterns, p) {
			patterns = append(patterns, p)
		}
	}
	// The target: formula a (on h1), node n; a dispatch is b's work (on h2),
	// which would run b.
	formula, node, home, other := "a", "n", "h1", "h2"
	if r.at.typ == events.TypeDispatch {
		formula, node, home, other = "b", "m", "h2", "h1"
	}
	type variant struct{ name, subjHost, dataHost, subjWF string }
	for _, p := range patterns {
		var vars []variant
		if strings.HasPrefix(p, "workflow.") {
			vars = []variant{{"victim", "", home, "victim"}, {"other workflow's subject", "", home, "other"}}
		} else {
			vars = []variant{{"victim", home, home, ""}, {"other host's subject", other, home, ""}, {"other host", other, other, ""}}
		}
		for _, va := range vars {
			for k := range idKinds {
				v := r.v[k]
				if r.own[k] != nil && p == r.at.pattern && va.name == "victim" {
					v = r.own[k] // the executor's own report about its own host
				}
				wf := v.id
				if va.subjWF == "other" {
					wf = v.other
				}
				subject := fillPattern(p, va.subjHost, wf, node)
				ids := []struct{ label, id string }{{"fresh id", "forged-" + randomUUID()}}
				if k == idLogical {
					ids = []struct{ label, id string }{{"logical id of this type", ownLogicalID(r.at, v.id, formula, node)}}
					for _, f := range futureIDs(v.id) {
						if f.id != ids[0].id {
							ids = append(ids, f)
						} else {
							ids[0].label = "logical id of this type = " + f.label
						}
					}
				}
				addAttempts(r, v, subject, va.name, va.dataHost, formula, node, ids)
			}
		}
	}
}

// addAttempts adds the attempts of one subject and data host, one per id.
func addAttempts(r *attackRow, v *attackVictim, subject, variant, dataHost, formula, node string, ids []struct{ label, id string }) {
	for _, id := range ids {
		at := &attackAttempt{subject: subject, variant: variant, idLabel: id.label, msgID: id.id}
		at.source = fmt.Sprintf("%s%s%d-%d", producer(r.at), forgedMark, v.idx, len(v.attempts))
		at.data = forgedEvent(r.at.typ, v, formula, node, dataHost, at.source)
		v.attempts = append(v.attempts, at)
	}
}

func producer(at attackType) string { return string(at.by[0]) }

// fillPattern fills a subject pattern's wildcards: the host, the workflow,
// the node of a log subject, the zone of a dispatch.
func fillPattern(p, host, wf, node string) string {
	parts := strings.Split(p, ".")
	if parts[0] == "workflow" {
		parts[1] = wf
	} else {
		parts[1] = host
		if len(parts) == 4 && parts[3] == "*" {
			if parts[2] == "dispatch" {
				parts[3] = events.NoZone
			} else {
				parts[3] = node
			}
		}
	}
	return strings.Join(parts, ".")
}

// futureIDs are the logical message ids of the victim's real events that
// come after the attack, as their producers build them (the executor's
// formula.msgID, the planner's engine.msgID): a's node failed and a
// failed (the executor), b blocked and its node (the planner), the
// workflow failed (the planner).
func futureIDs(wf string) []struct{ label, id string } {
	return []struct{ label, id string }{
		{"future id of a/n failed", events.MsgID(wf, "1", "a", "n", "failed", "1")},
		{"future id of a failed", events.MsgID(wf, "1", "a", "", "formula-failed", "0")},
		{"future id of b/m blocked", events.MsgID(wf, "1", "b", "m", "blocked")},
		{"future id of b blocked", events.MsgID(wf, "1", "b", "blocked")},
		{"future id of the workflow failed", events.MsgID(wf, "1", "workflow", "failed", "0")},
	}
}

// ownLogicalID is the logical id an event of this type about the target
// would have, from its first producer.
func ownLogicalID(at attackType, wf, formula, node string) string {
	what := at.typ.What()
	switch at.typ.Family() {
	case events.FamilyWorkflow:
		return events.MsgID(wf, "1", "workflow", what, "0")
	case events.FamilyFormula:
		if at.by[0] == events.Executor {
			return events.MsgID(wf, "1", formula, "", "formula-"+what, "0")
		}
		return events.MsgID(wf, "1", formula, what)
	case events.FamilyNode:
		if at.by[0] == events.Executor {
			return events.MsgID(wf, "1", formula, node, what, "1")
		}
		return events.MsgID(wf, "1", formula, node, what)
	case events.FamilyRollout:
		id := []string{wf, "1", formula, "rollout", what}
		if at.typ != events.TypeRolloutStopped {
			id = append(id, "1")
		}
		return events.MsgID(id...)
	case events.FamilyHealth:
		if at.typ == events.TypeHealthAttempt {
			return events.MsgID(wf, "1", formula, "gate", "attempt", "1")
		}
		return events.MsgID(wf, "1", formula, "gate", "final", "1")
	case events.FamilyProgress:
		return events.MsgID(wf, "1", formula, node, "progress-1-50", "1")
	case events.FamilyLog: // output lines have no id; this is what one would be
		return events.MsgID(wf, "1", formula, node, "log", "1")
	}
	switch at.typ {
	case events.TypeDispatch:
		return events.MsgID(wf, "1", formula, "dispatch")
	case events.TypeGateRequest:
		return events.MsgID(wf, "1", formula, "gate")
	}
	return events.MsgID(wf, "1", string(at.typ))
}

// forgedEvent is a well-formed CloudEvent of type ty about the victim's
// formula (a, or b for a dispatch) on host, as its producer would send it.
func forgedEvent(ty events.Type, v *attackVictim, formula, node, host, source string) []byte {
	now := time.Now().UTC()
	ref := events.Ref{WorkflowID: v.id, Workflow: v.comp.Name, Formula: formula, Host: host, Operation: dag.OpCreate, Generation: 1}
	nref := ref
	nref.Node = node
	zero := 0
	run := events.Run{Attempt: 1, StartedAt: &now, EndedAt: &now, ExitCode: &zero}
	var p events.Payload
	switch ty.Family() {
	case events.FamilyWorkflow:
		wref := ref
		wref.Formula = ""
		st := dag.WorkflowState(ty.What())
		p = &events.WorkflowEvent{Ref: wref, Status: st, Run: run, Formulas: map[dag.FormulaState]int{dag.FormulaSucceeded: 2}, TotalNodes: 2, Reason: "forged"}
	case events.FamilyFormula:
		p = &events.FormulaEvent{Ref: ref, Status: dag.FormulaState(ty.What()), Run: run}
	case events.FamilyNode:
		p = &events.NodeEvent{Ref: nref, Status: dag.NodeState(ty.What()), Run: run, MaxAttempts: 1, GenAttempt: 1, SpecHash: v.specHash, Actor: v.actor, Reason: "forged"}
	case events.FamilyHealth:
		st := events.HealthPass
		if ty == events.TypeHealthFailed {
			st = events.HealthFail
		}
		p = &events.HealthEvent{Ref: ref, Status: st, Run: run, Final: ty != events.TypeHealthAttempt, Retries: 1}
	case events.FamilyLog:
		p = &events.LogLine{Ref: nref, Attempt: 1, Stream: events.Stdout, Seq: 1000, Line: "forged line " + source}
	case events.FamilyProgress:
		p = &events.ProgressEvent{Ref: nref, Attempt: 1, Percent: 100}
	case events.FamilyRollout:
		p = &events.RolloutEvent{Ref: ref, Status: events.RolloutStatus(ty.What()), Batch: 1, Batches: 1, Instances: []string{formula}, MaxFailed: 0, At: &now}
	}
	switch ty {
	case events.TypeDispatch:
		p = &events.Dispatch{Ref: ref, Host: events.HostSpec{Transport: dag.TransportLocal}, MaxParallel: 1, Order: []string{node},
			Nodes: []events.WorkNode{{Name: node, Command: "touch " + v.markerB + " " + v.pwned, Timeout: dag.Duration(10 * time.Second),
				Retry: dag.RetryPolicy{MaxAttempts: 1}, SpecHash: "sha256:forged"}}}
	case events.TypeGateRequest:
		p = &events.GateRequest{Ref: ref, Host: events.HostSpec{Transport: dag.TransportLocal},
			Gate: dag.HealthGate{Check: "touch " + v.pwned, Timeout: dag.Duration(5 * time.Second), Retries: 1}}
	}
	env, err := events.NewAt(randomUUID(), source, now, p)
	if err != nil {
		panic(err)
	}
	b, err := json.Marshal(env)
	if err != nil {
		panic(err)
	}
	return b
}

// attacker publishes as one identity. A publish the server refuses is
// told apart by the permissions violation it reports for the subject.
type attacker struct {
	js     jetstream.JetStream
	mu     sync.Mutex
	denied map[string]chan struct{}
	closed map[string]bool
}

var deniedPublish = regexp.MustCompile(`(?i)publish to "([^"]+)"`)

func newAttacker(t *testing.T, s *stack, who events.Identity) *attacker {
	a := &attacker{denied: map[string]chan struct{}{}, closed: map[string]bool{}}
	nc := s.ns.Connect(who, nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if m := deniedPublish.FindStringSubmatch(err.Error()); m != nil && errors.Is(err, nats.ErrPermissionViolation) {
			a.mu.Lock()
			defer a.mu.Unlock()
			if !a.closed[m[1]] {
				a.closed[m[1]] = true
				close(a.ch(m[1]))
			}
		}
	}))
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	a.js = js
	return a
}

func (a *attacker) ch(subject string) chan struct{} {
	c, ok := a.denied[subject]
	if !ok {
		c = make(chan struct{})
		a.denied[subject] = c
	}
	return c
}

// publish stores data on subject under msgID: the server refuses it, or
// the stream stores it, or drops it as a duplicate.
func (a *attacker) publish(ctx context.Context, subject string, data []byte, msgID string) (result, stream string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	a.mu.Lock()
	denied := a.ch(subject)
	a.mu.Unlock()
	go func() {
		select {
		case <-denied:
			cancel()
		case <-ctx.Done():
		}
	}()
	ack, err := a.js.PublishMsg(ctx, &nats.Msg{Subject: subject, Data: data, Header: nats.Header{}}, jetstream.WithMsgID(msgID))
	select {
	case <-denied:
		return resRefused, ""
	default:
	}
	switch {
	case err != nil:
		return "error: " + err.Error(), ""
	case ack.Duplicate:
		return "duplicate", ack.Stream
	}
	return "stored", ack.Stream
}

// attackObserver follows the victims live, as an operator.
type attackObserver struct {
	mu      sync.Mutex
	running map[string]events.NodeEvent
	verdict map[string]dag.WorkflowState
}

func newAttackObserver(t *testing.T, s *stack) *attackObserver {
	o := &attackObserver{running: map[string]events.NodeEvent{}, verdict: map[string]dag.WorkflowState{}}
	nc := s.ns.Connect(events.Operator)
	for _, subj := range []string{events.HostLifecycle("h1"), events.AllWorkflowLifecycle} {
		_, err := nc.Subscribe(subj, func(m *nats.Msg) {
			env, err := events.Parse(m.Data)
			if err != nil || strings.Contains(env.Source, forgedMark) {
				return
			}
			o.mu.Lock()
			defer o.mu.Unlock()
			switch {
			case env.Type == events.NodeType(dag.NodeRunning):
				var e events.NodeEvent
				if events.DecodeData(env, &e) == nil && e.Formula == "a" && e.Node == "n" {
					o.running[e.WorkflowID] = e
				}
			case env.Type.Family() == events.FamilyWorkflow && strings.HasPrefix(m.Subject, "workflow."):
				var e events.WorkflowEvent
				if events.DecodeData(env, &e) == nil && e.Status.Terminal() && m.Subject == events.WorkflowLifecycle(e.WorkflowID) {
					if _, seen := o.verdict[e.WorkflowID]; !seen {
						o.verdict[e.WorkflowID] = e.Status
					}
				}
			}
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if err := nc.Flush(); err != nil {
		t.Fatal(err)
	}
	return o
}

func (o *attackObserver) allRunning(vs []*attackVictim) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range vs {
		if _, ok := o.running[v.id]; !ok {
			return false
		}
	}
	return true
}

func (o *attackObserver) runningOf(id string) (specHash, actor string) {
	o.mu.Lock()
	defer o.mu.Unlock()
	e := o.running[id]
	return e.SpecHash, e.Actor
}

func (o *attackObserver) allEnded(vs []*attackVictim, id func(*attackVictim) string) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, v := range vs {
		if _, ok := o.verdict[id(v)]; !ok && id(v) != "" {
			return false
		}
	}
	return true
}

func (o *attackObserver) verdictOf(id string) dag.WorkflowState {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.verdict[id]
}

// eventHistory is what the event stream holds, read once as an
// administrator: each workflow's verdict (the first end of generation 1 on
// its own workflow subject, where only the planner may publish), and the
// logical ids of every event, by workflow.
type eventHistory struct {
	verdict map[string]dag.WorkflowState
	ids     map[string][]string
}

func readEventHistory(t *testing.T, s *stack) eventHistory {
	t.Helper()
	h := eventHistory{verdict: map[string]dag.WorkflowState{}, ids: map[string][]string{}}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cons, err := s.js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for {
		batch, err := cons.FetchNoWait(1000)
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			env, err := events.Parse(m.Data())
			if err != nil || strings.Contains(env.Source, forgedMark) {
				continue
			}
			wf, _, _ := strings.Cut(env.Subject, "/")
			logical, _, _ := strings.Cut(m.Headers().Get(jetstream.MsgIDHeader), "~")
			h.ids[wf] = append(h.ids[wf], logical)
			if env.Type.Family() != events.FamilyWorkflow || m.Subject() != events.WorkflowLifecycle(wf) {
				continue
			}
			var e events.WorkflowEvent
			if events.DecodeData(env, &e) == nil && e.Status.Terminal() && e.Generation == 1 {
				if _, seen := h.verdict[wf]; !seen {
					h.verdict[wf] = e.Status
				}
			}
		}
		if n == 0 {
			return h
		}
	}
}

// controlIDs says whether the real events of the unattacked run were
// stored under the logical ids the attack took.
func (h eventHistory) controlIDs(wf string) []struct {
	label, id string
	found     bool
} {
	var out []struct {
		label, id string
		found     bool
	}
	for _, f := range futureIDs(wf) {
		out = append(out, struct {
			label, id string
			found     bool
		}{f.label, f.id, slices.Contains(h.ids[wf], f.id)})
	}
	return out
}

// attackRefusals are the security log lines of the consumers.
type attackRefusals struct {
	bySource  map[string]map[string]bool // forged source -> consumers that refused it
	otherHost map[string]bool            // workflows with an event about another host than its formula's refused
}

func readRefusals(t *testing.T, path string) attackRefusals {
	t.Helper()
	r := attackRefusals{bySource: map[string]map[string]bool{}, otherHost: map[string]bool{}}
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if !bytes.Contains(sc.Bytes(), []byte(`"security":true`)) {
			continue
		}
		var l struct {
			Msg        string `json:"msg"`
			Consumer   string `json:"consumer"`
			Source     string `json:"source"`
			WorkflowID string `json:"workflow_id"`
		}
		if json.Unmarshal(sc.Bytes(), &l) != nil {
			continue
		}
		if l.Source != "" {
			if r.bySource[l.Source] == nil {
				r.bySource[l.Source] = map[string]bool{}
			}
			r.bySource[l.Source][cmpOr(l.Consumer, "?")] = true
		}
		if strings.Contains(l.Msg, "another host") && l.WorkflowID != "" {
			r.otherHost[l.WorkflowID] = true
		}
	}
	return r
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// judge lists how the victim's outcome differs from the truth: a failed,
// b blocked and never ran, the workflow FAILED (the planner's verdict and
// the state-store's), gantry watch non-zero, and a's node run again by the
// next submit. What is only shown (a forged line gantry logs prints, a
// node state.host lists on a host it never ran on or in another state
// than it ended in) it puts in v.shown.
func (v *attackVictim) judge() []string {
	var c []string
	if v.verdict != dag.WorkflowFailed {
		c = append(c, fmt.Sprintf("the planner's verdict is %q, not failed", cmpOr(string(v.verdict), "none (the run did not end)")))
	}
	switch d := v.doc; {
	case d == nil:
		c = append(c, "state.workflow has no document")
	default:
		if d.Status != dag.WorkflowFailed {
			c = append(c, "state.workflow says "+string(d.Status))
		}
		fa, fb := d.Formulas["a"], d.Formulas["b"]
		switch {
		case fa == nil || fa.Nodes["n"] == nil:
			c = append(c, "state.workflow has no a/n")
		case fa.Status != dag.FormulaFailed || fa.Nodes["n"].Status != dag.NodeFailed:
			c = append(c, fmt.Sprintf("state.workflow says a %s, a/n %s", fa.Status, fa.Nodes["n"].Status))
		}
		switch {
		case fb == nil || fb.Nodes["m"] == nil:
			c = append(c, "state.workflow has no b/m")
		case fb.Status != dag.FormulaBlocked || fb.Nodes["m"].Status != dag.NodeBlocked:
			c = append(c, fmt.Sprintf("state.workflow says b %s, b/m %s", fb.Status, fb.Nodes["m"].Status))
		}
	}
	if v.bRan {
		c = append(c, "b ran")
	}
	if v.pwnedRan {
		c = append(c, "a forged dispatch or gate ran")
	}
	if !v.told {
		v.changed = c
		return c
	}
	if v.watched && v.watchCode == 0 {
		c = append(c, "gantry watch exits 0: "+lastLine(v.watchOut))
	}
	v.shown = nil
	for _, n := range v.hostNodes {
		switch {
		case n.Host == "h1" && n.Formula == "a" && n.Node == "n" && n.Status != dag.NodeFailed:
			v.shown = append(v.shown, fmt.Sprintf("state.host h1 says a/n %s", n.Status))
		case n.Host == "h1" && n.Formula == "a" && n.Node == "n", n.Host == "h2" && n.Formula == "b" && n.Node == "m":
		default:
			v.shown = append(v.shown, fmt.Sprintf("state.host %s lists %s/%s %s (a runs on h1, b on h2)", n.Host, n.Formula, n.Node, n.Status))
		}
	}
	for _, m := range forgedLine.FindAllStringSubmatch(v.logsOut, -1) {
		desc := m[1]
		for _, at := range v.attempts {
			if at.source == m[1] {
				desc = at.subject + " (" + at.variant + ", " + at.idLabel + ")"
			}
		}
		v.shown = append(v.shown, "gantry logs printed the forged line of "+desc)
	}
	switch {
	case v.second == "":
		c = append(c, fmt.Sprintf("the composition could not be submitted again: %v", v.submitErr))
	case v.secondNode == dag.NodeSkipped:
		c = append(c, "the next submit skipped a/n")
	case v.secondNode != dag.NodeFailed:
		c = append(c, fmt.Sprintf("the next submit: a/n %q, workflow %q (want a/n run and failed)", v.secondNode, v.secondStatus))
	}
	v.changed = c
	return c
}

var forgedLine = regexp.MustCompile(`forged line (\S+)`)

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

func (v *attackVictim) storedIn(stream string) bool {
	for _, at := range v.attempts {
		if at.result == "stored" && at.stream == stream {
			return true
		}
	}
	return false
}

// judgeRow is the row's result: nothing stored; stored and every stored
// event refused by a consumer (a security log line names it; the log
// stream's lines only gantry logs and the web view read, checked with
// gantry logs); stored and some admitted without changing the outcome;
// or the outcome changed.
func (v *attackVictim) judgeRow() string {
	changed := v.judge()
	stored, admitted := 0, 0
	for _, at := range v.attempts {
		if at.result != "stored" {
			continue
		}
		stored++
		if len(at.refusedBy) == 0 && at.stream != events.StreamLogs {
			admitted++
		}
	}
	switch {
	case len(changed) > 0 && stored == 0:
		return resRefused + ", yet the outcome changed"
	case len(changed) > 0:
		return resApplied
	case stored == 0:
		return resRefused
	case len(v.shown) > 0:
		return resShown
	case admitted > 0:
		return resAdmitted
	}
	return resConsumers
}

// detail is the row's result with its counts and what changed or was
// admitted.
func (v *attackVictim) detail(res string) string {
	count := map[string]int{}
	var admitted []string
	consumers := map[string]bool{}
	for _, at := range v.attempts {
		r := at.result
		if strings.HasPrefix(r, "error") {
			r = "error"
		}
		count[r]++
		for c := range at.refusedBy {
			consumers[c] = true
		}
		if at.result == "stored" && len(at.refusedBy) == 0 && at.stream != events.StreamLogs {
			admitted = append(admitted, at.subject+" ("+at.variant+", "+at.idLabel+")")
		}
	}
	var parts []string
	for _, k := range []string{resRefused, "stored", "duplicate", "error"} {
		if count[k] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", count[k], k))
		}
	}
	out := res + " [" + strings.Join(parts, ", ") + "]"
	if len(consumers) > 0 {
		out += " refused by " + strings.Join(slices.Sorted(mapKeys(consumers)), ", ")
	}
	if len(v.changed) > 0 {
		out += "; changed: " + strings.Join(v.changed, "; ")
	}
	if len(v.shown) > 0 {
		out += "; shown: " + strings.Join(v.shown, ", ")
	}
	if len(admitted) > 0 {
		if len(admitted) > 4 {
			admitted = append(admitted[:4], fmt.Sprintf("and %d more", len(admitted)-4))
		}
		out += "; admitted: " + strings.Join(admitted, ", ")
	}
	for _, at := range v.attempts {
		if strings.HasPrefix(at.result, "error") {
			out += "; first error: " + at.subject + ": " + at.result
			break
		}
	}
	return out
}

func mapKeys(m map[string]bool) func(func(string) bool) {
	return func(yield func(string) bool) {
		for k := range m {
			if !yield(k) {
				return
			}
		}
	}
}

// submitComposition submits c as an operator: the workflow id.
func submitComposition(s *stack, c *dag.Composition) (string, error) {
	b, _ := json.Marshal(c)
	r, err := s.cl.WithTimeout(30*time.Second).Submit(context.Background(), b, nil)
	if err != nil {
		return "", fmt.Errorf("submit: %s", failure(err))
	}
	if r.Status != "accepted" {
		return "", fmt.Errorf("submit: %s %v", r.Status, r.Errors)
	}
	return r.WorkflowID, nil
}

// stateDoc is state.workflow's document of a workflow.
func stateDoc(s *stack, id string) (*events.WorkflowDoc, error) {
	d, err := s.cl.WithTimeout(10*time.Second).Status(context.Background(), id)
	if err != nil {
		return nil, fmt.Errorf("state.workflow: %s", failure(err))
	}
	return d, nil
}

// stateHost is state.host's nodes of a host.
func stateHost(s *stack, host string) ([]events.HostNode, error) {
	nodes, err := s.cl.WithTimeout(10*time.Second).Host(context.Background(), host)
	if err != nil {
		return nil, fmt.Errorf("state.host: %s", failure(err))
	}
	return nodes, nil
}

// runCLI runs the built gantry as an operator; its exit code and output.
func runCLI(ctx context.Context, bin string, s *stack, args ...string) (int, string) {
	ctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, append(args, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(events.Operator))...).CombinedOutput()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	case err != nil:
		return -1, err.Error()
	}
	return 0, string(out)
}

// parallel runs f(0..n-1), at most k at once.
func parallel(n, k int, f func(i int)) {
	sem := make(chan struct{}, k)
	var wg sync.WaitGroup
	for i := range n {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			f(i)
		}()
	}
	wg.Wait()
}

// waitUntil polls cond until it holds, d passes or ctx ends.
func waitUntil(ctx context.Context, d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		time.Sleep(100 * time.Millisecond)
	}
	return true
}

func randomUUID() string {
	var b [16]byte
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:])
}
