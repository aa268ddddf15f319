// Package project keeps the state-store's two projections in KV: per
// workflow (every formula and node) and per host and node across workflows
// (last state, operation, spec hash, times, actor, blocker, the last 50 log
// entries). Events are applied in stream order; an event whose stream
// sequence a document has already seen is skipped, so redelivery never
// counts a transition twice.
package project

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// Store holds projection documents: the gantry_state bucket, or memory
// for a rebuild.
type Store interface {
	// Get returns the value and revision, or nil when the key is absent.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// Put creates (rev 0) or compare-and-sets (rev > 0) a value.
	Put(ctx context.Context, key string, val []byte, rev uint64) (uint64, error)
}

// KVStore is a Store on a JetStream KV bucket.
type KVStore struct{ KV jetstream.KeyValue }

func (s KVStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (s KVStore) Put(ctx context.Context, key string, val []byte, rev uint64) (uint64, error) {
	if rev == 0 {
		return s.KV.Create(ctx, key, val)
	}
	return s.KV.Update(ctx, key, val, rev)
}

// MemStore is a Store in memory.
type MemStore struct {
	Vals map[string][]byte
	revs map[string]uint64
}

// NewMemStore returns an empty MemStore.
func NewMemStore() *MemStore { return &MemStore{Vals: map[string][]byte{}, revs: map[string]uint64{}} }

func (s *MemStore) Get(_ context.Context, key string) ([]byte, uint64, error) {
	v, ok := s.Vals[key]
	if !ok {
		return nil, 0, nil
	}
	return v, s.revs[key], nil
}

func (s *MemStore) Put(_ context.Context, key string, val []byte, rev uint64) (uint64, error) {
	if s.revs[key] != rev {
		return 0, fmt.Errorf("%s: revision %d, not %d", key, s.revs[key], rev)
	}
	s.revs[key]++
	s.Vals[key] = val
	return s.revs[key], nil
}

// Projector applies events to a Store.
type Projector struct {
	Store Store
	Log   *slog.Logger
	// mu serializes events and rebuilds.
	mu sync.Mutex
	// cache of documents and their revisions (one replica applies in
	// order; a conflicting write drops the entry and the event is retried)
	cache map[string]cached
	// applied is the highest stream sequence handled.
	applied uint64
}

// maxCached bounds the document cache.
const maxCached = 100_000

type cached struct {
	val any
	rev uint64
}

// Handle is the consumer handler for every event.
func (p *Projector) Handle(ctx context.Context, ev *consume.Event) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	err := p.apply(ctx, ev)
	if err == nil || errors.Is(err, events.ErrMalformed) || errors.Is(err, events.ErrUnknownType) {
		p.applied = max(p.applied, ev.Stream)
	}
	return err
}

func (p *Projector) apply(ctx context.Context, ev *consume.Event) error {
	switch ev.Type.Family() {
	case events.FamilyWorkflow:
		var w events.WorkflowEvent
		if err := events.DecodeData(ev.Envelope, &w); err != nil {
			return err
		}
		return p.workflow(ctx, ev, &w)
	case events.FamilyFormula:
		var f events.FormulaEvent
		if err := events.DecodeData(ev.Envelope, &f); err != nil {
			return err
		}
		return p.formula(ctx, ev, &f)
	case events.FamilyNode:
		var n events.NodeEvent
		if err := events.DecodeData(ev.Envelope, &n); err != nil {
			return err
		}
		if err := p.node(ctx, ev, &n); err != nil {
			return err
		}
		return p.hostNode(ctx, ev, &n)
	case events.FamilyHealth:
		var h events.HealthEvent
		if err := events.DecodeData(ev.Envelope, &h); err != nil {
			return err
		}
		return p.health(ctx, ev, &h)
	}
	return nil
}

func get[T any](ctx context.Context, p *Projector, key string) (*T, uint64, error) {
	if c, ok := p.cache[key]; ok {
		return c.val.(*T), c.rev, nil
	}
	b, rev, err := p.Store.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", key, err)
	}
	if b == nil {
		return nil, 0, nil
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, 0, fmt.Errorf("decode %s: %w", key, err)
	}
	return v, rev, nil
}

func (p *Projector) put(ctx context.Context, key string, v any, rev uint64) error {
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", key, err)
	}
	nrev, err := p.Store.Put(ctx, key, b, rev)
	if err != nil {
		delete(p.cache, key)
		return fmt.Errorf("write %s: %w", key, err)
	}
	if p.cache == nil || len(p.cache) >= maxCached {
		p.cache = map[string]cached{} // a bound; what is dropped is read again
	}
	p.cache[key] = cached{v, nrev}
	return nil
}

// workflowDoc loads (or starts) a workflow's summary; ok is false when the
// event was already applied.
func (p *Projector) workflowDoc(ctx context.Context, ev *consume.Event, r events.Ref) (*events.WorkflowDoc, uint64, bool, error) {
	doc, rev, err := get[events.WorkflowDoc](ctx, p, events.WorkflowDocKey(r.WorkflowID))
	if err != nil {
		return nil, 0, false, err
	}
	if doc == nil {
		doc = &events.WorkflowDoc{WorkflowID: r.WorkflowID, Workflow: r.Workflow, Operation: r.Operation, Status: dag.WorkflowAccepted,
			Generation: r.Generation, CreatedAt: ev.Time}
	}
	if ev.Stream <= doc.LastSeq {
		return nil, 0, false, nil
	}
	doc.LastSeq = ev.Stream
	doc.UpdatedAt = ev.Time
	if r.Generation > doc.Generation {
		doc.Generation = r.Generation
	}
	return doc, rev, true, nil
}

func (p *Projector) workflow(ctx context.Context, ev *consume.Event, w *events.WorkflowEvent) error {
	doc, rev, ok, err := p.workflowDoc(ctx, ev, w.Ref)
	if !ok || err != nil {
		return err
	}
	if w.Generation >= doc.Generation {
		doc.Status = w.Status
		doc.Error = w.Error
		doc.EndedAt = w.EndedAt
		if w.Status == dag.WorkflowAccepted {
			doc.CreatedAt = ev.Time
		}
		if n := sum(w.Formulas); n > 0 {
			doc.FormulaCount, doc.NodeCount = n, w.TotalNodes
		}
	}
	return p.put(ctx, events.WorkflowDocKey(w.WorkflowID), doc, rev)
}

func sum(m map[events.FormulaState]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

// formulaDoc loads (or starts) one formula's document; ok is false when the
// event was already applied or belongs to an older generation.
func (p *Projector) formulaDoc(ctx context.Context, ev *consume.Event, r events.Ref) (*events.FormulaDoc, uint64, bool, error) {
	f, rev, err := get[events.FormulaDoc](ctx, p, events.FormulaDocKey(r.WorkflowID, r.Formula))
	if err != nil {
		return nil, 0, false, err
	}
	if f == nil {
		f = &events.FormulaDoc{Host: r.Host, Status: dag.FormulaPending, Generation: r.Generation}
	}
	if ev.Stream <= f.LastSeq || r.Generation < f.Generation {
		return nil, 0, false, nil
	}
	f.LastSeq, f.Generation = ev.Stream, r.Generation
	return f, rev, true, nil
}

func (p *Projector) formula(ctx context.Context, ev *consume.Event, e *events.FormulaEvent) error {
	f, rev, ok, err := p.formulaDoc(ctx, ev, e.Ref)
	if !ok || err != nil {
		return err
	}
	f.Status, f.Blocker, f.Error = e.Status, e.Blocker, e.Error
	if e.Status == dag.FormulaRunning || (f.StartedAt == nil && e.StartedAt != nil) {
		f.StartedAt = e.StartedAt
	}
	if e.EndedAt != nil {
		f.EndedAt = e.EndedAt
	}
	return p.put(ctx, events.FormulaDocKey(e.WorkflowID, e.Formula), f, rev)
}

func (p *Projector) node(ctx context.Context, ev *consume.Event, e *events.NodeEvent) error {
	// An event of an older generation than its formula has reached is late.
	if f, _, err := get[events.FormulaDoc](ctx, p, events.FormulaDocKey(e.WorkflowID, e.Formula)); err != nil {
		return err
	} else if f != nil && e.Generation < f.Generation {
		return nil
	}
	key := events.NodeDocKey(e.WorkflowID, e.Formula, e.Node)
	n, rev, err := get[events.NodeDoc](ctx, p, key)
	if err != nil {
		return err
	}
	if n == nil {
		n = &events.NodeDoc{Status: dag.NodePending}
	}
	if ev.Stream <= n.LastSeq || e.Generation < n.Generation {
		return nil
	}
	n.LastSeq, n.Generation = ev.Stream, e.Generation
	n.Transitions++
	n.Operation = e.Operation
	if e.Status == dag.NodeRunning {
		n.Attempts++
		n.StartedAt, n.EndedAt, n.ExitCode, n.Error = e.StartedAt, nil, nil, ""
	}
	if e.EndedAt != nil {
		n.EndedAt = e.EndedAt
	}
	n.Status = e.Status
	if e.WillRetry { // failed, but the node is still at work
		n.Status = dag.NodeRunning
	}
	if e.ExitCode != nil {
		n.ExitCode = e.ExitCode
	}
	if e.Error != "" {
		n.Error = e.Error
	}
	n.Blocker, n.Check = e.Blocker, e.Check
	if e.SpecHash != "" {
		n.SpecHash = e.SpecHash
	}
	return p.put(ctx, key, n, rev)
}

func (p *Projector) hostNode(ctx context.Context, ev *consume.Event, e *events.NodeEvent) error {
	key := events.HostNodeKey(e.Ref.Host, e.Formula, e.Node)
	hn, rev, err := get[events.HostNode](ctx, p, key)
	if err != nil {
		return err
	}
	if hn == nil {
		hn = &events.HostNode{Host: e.Ref.Host, Formula: e.Formula, Node: e.Node, Status: dag.NodePending}
	}
	if ev.Stream <= hn.LastSeq {
		return nil
	}
	hn.LastSeq = ev.Stream
	// Only what happened to the host counts: blocked and cancelled nodes
	// did not run, so they do not replace a node's last real state.
	switch e.Status {
	case dag.NodeBlocked, dag.NodeCancelled:
		if hn.Status == dag.NodePending {
			hn.Status, hn.Blocker = e.Status, e.Blocker
		}
	default:
		hn.Status = e.Status
		if e.WillRetry {
			hn.Status = dag.NodeRunning
		}
		hn.Operation, hn.WorkflowID, hn.Actor, hn.Blocker = e.Operation, e.WorkflowID, e.Actor, ""
		if e.SpecHash != "" {
			hn.SpecHash = e.SpecHash
		}
		if e.Status == dag.NodeRunning {
			hn.StartedAt, hn.EndedAt = e.StartedAt, nil
		}
		if e.EndedAt != nil {
			hn.EndedAt = e.EndedAt
		}
	}
	hn.Log = append(hn.Log, events.HostLogEntry{Time: ev.Time, Event: ev.Type, WorkflowID: e.WorkflowID, Status: e.Status, Attempt: e.Attempt, Error: e.Error})
	if len(hn.Log) > events.MaxHostLog {
		hn.Log = append([]events.HostLogEntry(nil), hn.Log[len(hn.Log)-events.MaxHostLog:]...)
	}
	return p.put(ctx, key, hn, rev)
}

func (p *Projector) health(ctx context.Context, ev *consume.Event, h *events.HealthEvent) error {
	f, rev, ok, err := p.formulaDoc(ctx, ev, h.Ref)
	if !ok || err != nil {
		return err
	}
	f.Health = &events.HealthDoc{Status: h.Status, Attempts: h.Attempt, Final: h.Final, Output: h.OutputTail, Error: h.Error}
	return p.put(ctx, events.FormulaDocKey(h.WorkflowID, h.Formula), f, rev)
}
