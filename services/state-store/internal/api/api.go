// Package api serves the state-store's projections as a NATS micro
// service: state.workflow, state.list and state.host.
package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/services/state-store/internal/drift"
	"github.com/gantry-dev/gantry/services/state-store/internal/project"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/micro"
)

// Rebuilder rebuilds (or, checkOnly, compares) the projection from the stream.
type Rebuilder func(ctx context.Context, checkOnly bool) (*project.RebuildReport, error)

// CatchUpWait bounds how long a read waits for the projection to apply
// the events stored before it (at most half of its budget); then it
// answers with what is there.
const CatchUpWait = 2 * time.Second

// ReadBudget bounds a read: within it (or within nine tenths of what its
// requester waits, when less: eventbus.HandlerContext) it answers, with an
// error if JetStream did not answer, instead of holding the request until
// its requester gave up.
const ReadBudget = 10 * time.Second

// DownFor is how long after a read failed for want of JetStream (it did
// not answer, or had no responders) this replica answers every read with
// that error at once: its endpoints take one request at a time, and each
// would otherwise hold the next for ReadBudget. The requester asks again
// of every replica (events.StateRetry).
const DownFor = 5 * time.Second

// Documents is the projection the reads answer from: project.KVStore on
// gantry_state.
type Documents interface {
	// Get returns a document and its revision, or nil when the key is
	// absent.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Keys lists the keys matching a KV subject filter ("wf.*"); none is
	// an empty list, not an error.
	Keys(ctx context.Context, filter string) ([]string, error)
	// Values reads every document whose key matches a KV subject filter,
	// in one pass.
	Values(ctx context.Context, filter string) (map[string][]byte, error)
}

// Register adds the state-store service (version, instance and status as
// spec says) and its endpoints. catchUp returns once every event
// stored so far is projected: reads wait for it (at most CatchUpWait), so
// that whoever saw an event on the stream (gantry watch) then reads its
// effect.
func Register(nc *nats.Conn, spec eventbus.ServiceSpec, docs Documents, log *slog.Logger, rebuild Rebuilder, catchUp func(context.Context) error) (micro.Service, error) {
	spec.ID = events.StateStore
	spec.Description = "gantry state-store: workflow and per-host projections"
	svc, err := eventbus.AddService(nc, spec)
	if err != nil {
		return nil, err
	}
	s := &server{docs: docs, log: log, rebuild: rebuild, catchUp: catchUp}
	g := svc.AddGroup("state")
	reads := map[string]micro.HandlerFunc{"workflow": s.workflow, "list": s.list, "host": s.host, "drift": s.drift}
	for name, h := range reads {
		if err := g.AddEndpoint(name, eventbus.OnlyRequests(h)); err != nil {
			return nil, err
		}
		// asked again of every replica when the queue group's pick did
		// not answer in time
		retry := events.StateRetry("state." + name)
		if err := svc.AddEndpoint(name+"-retry", eventbus.OnlyRequests(h), micro.WithEndpointSubject(retry), micro.WithEndpointQueueGroupDisabled()); err != nil {
			return nil, err
		}
	}
	if err := g.AddEndpoint("rebuild", eventbus.OnlyRequests(micro.HandlerFunc(s.rebuildHandler))); err != nil {
		return nil, err
	}
	return svc, nil
}

type server struct {
	docs    Documents
	log     *slog.Logger
	rebuild Rebuilder
	catchUp func(context.Context) error

	mu      sync.Mutex
	downAt  time.Time // the last read that failed for want of JetStream
	downWhy string
	// behindAt is when a read last said it answered from a projection
	// behind the stream; behindQuiet counts the reads since that did not.
	behindAt    time.Time
	behindQuiet int
}

// BehindLogEvery bounds how often reads say they answer from a
// projection behind the stream: while it catches up, every read does.
const BehindLogEvery = 30 * time.Second

// read returns the context of a read request (ReadBudget), once the
// projection has caught up with the stream or CatchUpWait has passed;
// false when it answered the request with an error already (DownFor).
func (s *server) read(req micro.Request) (context.Context, context.CancelFunc, bool) {
	if why := s.down(); why != "" {
		_ = req.Error("503", why, nil)
		return nil, nil, false
	}
	c, cancel := eventbus.HandlerContext(req.Headers(), ReadBudget)
	d, _ := c.Deadline()
	w, stop := context.WithTimeout(c, min(CatchUpWait, time.Until(d)/2))
	defer stop()
	if err := s.catchUp(w); err != nil {
		s.behind(err)
	}
	return c, cancel, true
}

// behind logs that a read answers from a projection behind the stream,
// at most once per BehindLogEvery, with how many reads since did too.
func (s *server) behind(err error) {
	s.mu.Lock()
	if !s.behindAt.IsZero() && time.Since(s.behindAt) < BehindLogEvery {
		s.behindQuiet++
		s.mu.Unlock()
		return
	}
	quiet := s.behindQuiet
	s.behindAt, s.behindQuiet = time.Now(), 0
	s.mu.Unlock()
	s.log.Warn("answering from a projection behind the stream", "err", err, "reads_since_last_said", quiet)
}

// down is the error every read answers at once while DownFor has not
// passed since a read failed for want of JetStream; "" otherwise.
func (s *server) down() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.downAt.IsZero() || time.Since(s.downAt) > DownFor {
		return ""
	}
	return s.downWhy
}

// fail answers a read that failed: 503 when JetStream did not answer
// (eventbus.Transient), remembered for DownFor; else 500. A read that ran
// out of a budget shorter than eventbus.NoAnswerAfter (its requester said
// it waits that little) ran out of its requester's time, which says
// nothing of JetStream: it is not remembered; nor is one that ran out of
// its budget while JetStream answers a probe (answers): its own cost.
func (s *server) fail(req micro.Request, err error) {
	if !eventbus.Transient(err) {
		_ = req.Error("500", err.Error(), nil)
		return
	}
	why := "the state-store cannot read its projection now (JetStream did not answer): " + err.Error()
	if errors.Is(err, context.DeadlineExceeded) && eventbus.HandlerBudget(req.Headers(), ReadBudget) < eventbus.NoAnswerAfter {
		_ = req.Error("503", why, nil)
		return
	}
	if budget := eventbus.HandlerBudget(req.Headers(), ReadBudget); errors.Is(err, context.DeadlineExceeded) && s.answers(budget/20) {
		// JetStream answers: the request ran out of its budget on its
		// own cost (a drift of many hosts, one large read), which must
		// not make every other read fail.
		_ = req.Error("503", "the query did not finish within its read budget ("+budget.Round(time.Millisecond).String()+"; JetStream answers): ask for less, for example fewer hosts: "+err.Error(), nil)
		return
	}
	s.mu.Lock()
	first := s.downAt.IsZero() || time.Since(s.downAt) > DownFor
	s.downAt, s.downWhy = time.Now(), why
	s.mu.Unlock()
	if first {
		s.log.Warn("reads fail: JetStream does not answer; answering reads with the error at once for a while", "for", DownFor, "err", err)
	}
	_ = req.Error("503", why, nil)
}

// drift compares the nodes a composition wants (events.DriftQuery: the
// requester rendered the composition) with its own records in the
// per-host projection of their hosts. It renders nothing: whoever may
// read may ask, so a read costs the state-store what the query's size
// and the records do, never what a composition's templates would.
func (s *server) drift(req micro.Request) {
	q, ok := driftQuery(req)
	if !ok {
		return
	}
	cx, cancel, ok := s.read(req)
	if !ok {
		return
	}
	defer cancel()
	var recorded []events.HostNode
	hosts := map[string]bool{}
	for _, n := range q.Nodes {
		if hosts[n.Host] {
			continue
		}
		hosts[n.Host] = true
		nodes, err := s.hostNodes(cx, events.HostWorkflowPrefix(n.Host, q.Workflow)+">", n.Host)
		if err != nil {
			s.fail(req, err)
			return
		}
		recorded = append(recorded, nodes...)
	}
	respond(req, drift.Compare(q, recorded))
}

// driftQuery reads a drift query, or answers 400 naming what is wrong
// with it. A composition in its place (what state.drift took before) is
// refused: the state-store renders no composition for a read.
func driftQuery(req micro.Request) (*events.DriftQuery, bool) {
	data, err := eventbus.BodyAtMost(&nats.Msg{Data: req.Data(), Header: nats.Header(req.Headers())}, eventbus.MaxUnpackedBytes)
	var q events.DriftQuery
	if err == nil {
		d := json.NewDecoder(bytes.NewReader(data))
		d.DisallowUnknownFields()
		err = d.Decode(&q)
	}
	if err != nil {
		_ = req.Error("400", "state.drift takes the nodes a composition wants ({workflow, nodes: [{host, formula, node, spec}]}), rendered on the requester's side (gantry drift --records does), not a composition: "+err.Error(), nil)
		return nil, false
	}
	if p := events.DriftQueryProblem(&q); p != "" {
		_ = req.Error("400", "state.drift: "+p, nil)
		return nil, false
	}
	return &q, true
}

func (s *server) rebuildHandler(req micro.Request) {
	var q events.RebuildQuery
	if !decode(req, &q) {
		return
	}
	cx, cancel := context.WithTimeout(context.Background(), rebuildTimeout(q.TimeoutMS))
	defer cancel()
	rep, err := s.rebuild(cx, q.CheckOnly)
	if err != nil {
		if cx.Err() != nil {
			err = fmt.Errorf("%w: not done within %s", err, rebuildTimeout(q.TimeoutMS))
		}
		_ = req.Error("500", "rebuild: "+err.Error(), nil)
		return
	}
	respond(req, rep)
}

// MaxRebuildTime bounds a rebuild (the events wait while it runs).
const MaxRebuildTime = 5 * time.Minute

// rebuildTimeout is how long a rebuild may take: what the client waits
// for (ms), a little less so that it hears why when the time is up, and
// never more than MaxRebuildTime.
func rebuildTimeout(ms int64) time.Duration {
	d := time.Duration(ms) * time.Millisecond
	if d <= 0 || d > MaxRebuildTime {
		return MaxRebuildTime
	}
	return d - min(d/10, time.Second)
}

func decode(req micro.Request, v any) bool {
	if len(req.Data()) == 0 {
		return true
	}
	data, err := eventbus.BodyAtMost(&nats.Msg{Data: req.Data(), Header: nats.Header(req.Headers())}, eventbus.MaxQueryBytes)
	if err == nil {
		err = json.Unmarshal(data, v)
	}
	if err != nil {
		_ = req.Error("400", "bad request body: "+err.Error(), nil)
		return false
	}
	return true
}

// respond answers with v, compressed when large (a fleet's workflow
// document); a reply that cannot fit in one message is an error that says
// so, not a silence.
func respond(req micro.Request, v any) {
	b, packed, err := eventbus.EncodeBody(v)
	if err != nil {
		_ = req.Error("500", "reply: "+err.Error(), nil)
		return
	}
	if packed {
		_ = req.Respond(b, micro.WithHeaders(micro.Headers{eventbus.EncodingHeader: {eventbus.EncodingGzip}}))
		return
	}
	_ = req.Respond(b)
}

func (s *server) workflow(req micro.Request) {
	var q events.WorkflowQuery
	if !decode(req, &q) {
		return
	}
	if !dag.IsToken(q.WorkflowID) {
		_ = req.Error("400", "workflow_id is missing or not a token", nil)
		return
	}
	c, cancel, ok := s.read(req)
	if !ok {
		return
	}
	defer cancel()
	b, _, err := s.docs.Get(c, project.WorkflowDocKey(q.WorkflowID))
	if err != nil {
		s.fail(req, err)
		return
	}
	if b == nil {
		_ = req.Error("404", "no workflow "+q.WorkflowID, nil)
		return
	}
	var doc events.WorkflowDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		_ = req.Error("500", "decode: "+err.Error(), nil)
		return
	}
	if err := s.assemble(c, &doc); err != nil {
		s.fail(req, err)
		return
	}
	doc.Pages = 0 // the store's layout, not the workflow's
	respond(req, doc)
}

// assemble fills a workflow document with its formula and node documents,
// read in one pass (Documents.Values of wf.<id>.>).
func (s *server) assemble(c context.Context, doc *events.WorkflowDoc) error {
	prefix := project.FormulaDocPrefix(doc.WorkflowID)
	vals, err := s.docs.Values(c, prefix+">")
	if err != nil {
		return fmt.Errorf("read %s>: %w", prefix, err)
	}
	doc.Formulas = map[string]*events.FormulaDoc{}
	nodes := map[string]map[string]*events.NodeDoc{}
	for key, val := range vals {
		formula, node, isNode := strings.Cut(strings.TrimPrefix(key, prefix), ".")
		if isNode {
			var n events.NodeDoc
			if json.Unmarshal(val, &n) == nil {
				if nodes[formula] == nil {
					nodes[formula] = map[string]*events.NodeDoc{}
				}
				nodes[formula][node] = &n
			}
			continue
		}
		var f events.FormulaDoc
		if json.Unmarshal(val, &f) == nil {
			doc.Formulas[formula] = &f
		}
	}
	for id, f := range doc.Formulas {
		f.Nodes = nodes[id]
		if f.Nodes == nil {
			f.Nodes = map[string]*events.NodeDoc{}
		}
	}
	return nil
}

func (s *server) list(req micro.Request) {
	var q events.ListQuery
	if !decode(req, &q) {
		return
	}
	if q.Limit <= 0 {
		q.Limit = 50
	}
	c, cancel, ok := s.read(req)
	if !ok {
		return
	}
	defer cancel()
	keys, err := s.docs.Keys(c, "wf.*")
	if err != nil {
		s.fail(req, err)
		return
	}
	rows := []events.WorkflowSummary{}
	for _, k := range keys {
		b, _, err := s.docs.Get(c, k)
		if err != nil && c.Err() != nil {
			s.fail(req, err) // not a partial list
			return
		}
		if err != nil || b == nil {
			continue // gone since listed
		}
		var d events.WorkflowDoc
		if json.Unmarshal(b, &d) != nil {
			continue
		}
		row := events.WorkflowSummary{WorkflowID: d.WorkflowID, Workflow: d.Workflow, Operation: d.Operation, Status: d.Status,
			CreatedAt: d.CreatedAt, UpdatedAt: d.UpdatedAt, Formulas: d.FormulaCount, Nodes: d.NodeCount,
			EndedAt: d.EndedAt, SubmittedBy: d.SubmittedBy}
		rows = append(rows, row)
	}
	sort.Slice(rows, func(i, j int) bool {
		if !rows[i].CreatedAt.Equal(rows[j].CreatedAt) {
			return rows[i].CreatedAt.After(rows[j].CreatedAt)
		}
		return rows[i].WorkflowID > rows[j].WorkflowID
	})
	if len(rows) > q.Limit {
		rows = rows[:q.Limit]
	}
	respond(req, rows)
}

// hostNodes reads every per-host document matching filter, sorted by key:
// of host only, unless host is "" (keys carry a host token, which two
// names may share).
func (s *server) hostNodes(c context.Context, filter, host string) ([]events.HostNode, error) {
	vals, err := s.docs.Values(c, filter)
	if err != nil {
		return nil, err
	}
	nodes := []events.HostNode{}
	for _, k := range slices.Sorted(maps.Keys(vals)) {
		var hn events.HostNode
		if json.Unmarshal(vals[k], &hn) == nil && (host == "" || hn.Host == host) {
			nodes = append(nodes, hn)
		}
	}
	return nodes, nil
}

// answers says whether JetStream answers a read of the projection now,
// within wait (at most NoAnswerAfter): a listing of keys no document has
// (which its stream's leader answers, as the reads that failed need; a
// Get may be answered by a replica without one).
func (s *server) answers(wait time.Duration) bool {
	ctx, cancel := context.WithTimeout(context.Background(), min(wait, eventbus.NoAnswerAfter))
	defer cancel()
	_, err := s.docs.Keys(ctx, "probe.none")
	return err == nil
}

func (s *server) host(req micro.Request) {
	var q events.HostQuery
	if !decode(req, &q) {
		return
	}
	prefix := "host.>"
	if q.Host != "" {
		if p := dag.HostNameProblem(q.Host); p != "" {
			_ = req.Error("400", "host name "+p, nil)
			return
		}
		prefix = events.HostNodePrefix(q.Host) + ">"
	}
	c, cancel, ok := s.read(req)
	if !ok {
		return
	}
	defer cancel()
	nodes, err := s.hostNodes(c, prefix, q.Host)
	if err != nil {
		s.fail(req, err)
		return
	}
	respond(req, nodes)
}
