// Package project keeps the state-store's two projections in KV: per
// workflow (every formula and node) and per host, composition and node
// across workflows (last state, operation, spec hash, times, actor,
// blocker, what a create put in place, the last check, the last 50 log
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
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Store holds projection documents: the gantry_state bucket, or memory
// for a rebuild.
type Store interface {
	// Get returns the value and revision, or nil when the key is absent.
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	// PutAll writes every value, creating it (Rev 0) or compare-and-setting
	// it (Rev > 0), and sets each write's NewRev or Err. The writes go out
	// together; PutAll returns when each has its answer.
	PutAll(ctx context.Context, ws []Write)
	// Mark writes val unconditionally without waiting for it to be stored
	// (a lost mark costs only work redone); it may return the failure of
	// an earlier Mark.
	Mark(ctx context.Context, key string, val []byte) error
	// RemoveWorkflow removes every document of a workflow (wf.<id> and
	// wf.<id>.>), leaving nothing behind; removing what is gone does
	// nothing.
	RemoveWorkflow(ctx context.Context, id string) error
}

// Write is one document write of a flush.
type Write struct {
	Key    string
	Val    []byte
	Rev    uint64 // the revision it replaces; 0 creates
	NewRev uint64
	Err    error
}

// KVStore is a Store on a JetStream KV bucket. Its writes are KV
// publishes with the expected per-key revision, sent asynchronously.
type KVStore struct {
	JS jetstream.JetStream
	KV jetstream.KeyValue
	// Storage, when set, is told how the writes went (they are published
	// without the bucket's own calls, which it observes).
	Storage *events.Storage
	// mark is the last Mark's acknowledgement.
	mark jetstream.PubAckFuture
}

func (s *KVStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	e, err := s.KV.Get(ctx, key)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil, 0, nil
	}
	if err != nil {
		return nil, 0, err
	}
	return e.Value(), e.Revision(), nil
}

func (s *KVStore) subject(key string) string { return "$KV." + s.KV.Bucket() + "." + key }

// PutAll publishes every write, then waits for their acknowledgements,
// at most events.PublishTimeout in all: JetStream does not answer a
// write it cannot store (its disk full), and a wait for ever would stop
// the projection for good.
func (s *KVStore) PutAll(ctx context.Context, ws []Write) {
	futs := make([]jetstream.PubAckFuture, len(ws))
	sent := time.Now()
	for i := range ws {
		m := &nats.Msg{Subject: s.subject(ws[i].Key), Data: ws[i].Val, Header: nats.Header{}}
		futs[i], ws[i].Err = s.JS.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(ws[i].Rev))
	}
	wctx, cancel := context.WithTimeout(ctx, events.PublishTimeout)
	defer cancel()
	for i, f := range futs {
		if f == nil {
			continue
		}
		select {
		case ack := <-f.Ok():
			ws[i].NewRev = ack.Sequence
			_ = s.Storage.Observe(s.KV.Bucket(), sent, nil)
			continue
		case err := <-f.Err():
			ws[i].Err = s.Storage.Observe(s.KV.Bucket(), sent, err)
		case <-wctx.Done():
			ws[i].Err = s.Storage.Observe(s.KV.Bucket(), sent, wctx.Err())
			continue
		}
		if ws[i].Rev == 0 {
			// A key a rebuild deleted keeps a marker, which a create's
			// expected revision 0 refuses; KV's Create handles it.
			ws[i].NewRev, ws[i].Err = s.KV.Create(ctx, ws[i].Key, ws[i].Val)
		}
	}
}

func (s *KVStore) Mark(_ context.Context, key string, val []byte) error {
	var err error
	if f := s.mark; f != nil {
		select {
		case e := <-f.Err():
			err = fmt.Errorf("write %s: %w", f.Msg().Subject, e)
		default:
		}
	}
	s.mark, _ = s.JS.PublishMsgAsync(&nats.Msg{Subject: s.subject(key), Data: val})
	return err
}

// RemoveWorkflow purges the workflow's documents from the bucket's
// stream (no delete markers stay).
func (s *KVStore) RemoveWorkflow(ctx context.Context, id string) error {
	stream := events.KVStream(s.KV.Bucket())
	for _, key := range []string{WorkflowDocKey(id), WorkflowDocKey(id) + ".>"} {
		if _, err := events.PurgeSubject(ctx, s.JS, stream, s.subject(key)); err != nil {
			return err
		}
	}
	return nil
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

func (s *MemStore) PutAll(_ context.Context, ws []Write) {
	for i, w := range ws {
		if s.revs[w.Key] != w.Rev {
			ws[i].Err = fmt.Errorf("%s: revision %d, not %d", w.Key, s.revs[w.Key], w.Rev)
			continue
		}
		s.revs[w.Key]++
		s.Vals[w.Key] = w.Val
		ws[i].NewRev = s.revs[w.Key]
	}
}

func (s *MemStore) RemoveWorkflow(_ context.Context, id string) error {
	for k := range s.Vals {
		if workflowOf(k) == id {
			delete(s.Vals, k)
			delete(s.revs, k)
		}
	}
	return nil
}

func (s *MemStore) Mark(_ context.Context, key string, val []byte) error {
	s.revs[key]++
	s.Vals[key] = val
	return nil
}

// Projector applies events to a Store in batches: a batch's events in
// stream order to cached documents, then one write per document the batch
// changed, then the checkpoint.
type Projector struct {
	Store Store
	Log   *slog.Logger
	// Checkpoint is the key that holds the stream sequence up to which
	// every event's effects are written ("": none is kept).
	Checkpoint string
	// Heal, when set, re-creates the bucket a write found missing.
	Heal func(ctx context.Context) error
	// Records, when set, are the executors' node records a rebuild holds
	// the stream against.
	Records NodeRecords
	// audit, in a replay, observes every event applied.
	audit *Audit
	// mu serializes batches and rebuilds.
	mu sync.Mutex
	// cache of documents and their revisions; dirty lists the keys changed
	// since the last flush.
	cache map[string]*cached
	dirty []string
	puts  int
	// fresh holds the workflows whose documents are all this projector's
	// own creations (see get).
	fresh map[string]bool
	// applied is the highest stream sequence handled.
	applied uint64
	// removals are the workflows pruned by the batch under way: their
	// documents are removed after its writes.
	removals []string
	// sawPruned: a pruned event was applied (a replay then lacks the
	// pruned workflows' events).
	sawPruned bool
	// pos is applied again, for Await, under its own lock (mu is held
	// through a batch's writes).
	pos struct {
		sync.Mutex
		seq   uint64
		moved chan struct{} // closed when seq moves
	}
}

// advance records that every event up to seq is applied.
func (p *Projector) advance(seq uint64) {
	p.applied = max(p.applied, seq)
	p.pos.Lock()
	defer p.pos.Unlock()
	if seq > p.pos.seq {
		p.pos.seq = seq
		if p.pos.moved != nil {
			close(p.pos.moved)
			p.pos.moved = nil
		}
	}
}

// Applied is the stream sequence up to which every event is applied and
// written.
func (p *Projector) Applied() uint64 {
	p.pos.Lock()
	defer p.pos.Unlock()
	return p.pos.seq
}

// Await returns once every event up to stream sequence seq is applied and
// written, or with ctx's error.
func (p *Projector) Await(ctx context.Context, seq uint64) error {
	for {
		p.pos.Lock()
		at := p.pos.seq
		if at >= seq {
			p.pos.Unlock()
			return nil
		}
		if p.pos.moved == nil {
			p.pos.moved = make(chan struct{})
		}
		moved := p.pos.moved
		p.pos.Unlock()
		select {
		case <-moved:
		case <-ctx.Done():
			return fmt.Errorf("the projection has applied the stream up to %d of %d: %w", at, seq, ctx.Err())
		}
	}
}

// maxCached bounds the document cache.
const maxCached = 100_000

type cached struct {
	val   any
	rev   uint64
	dirty bool
	last  int // when last changed, counted in puts
}

// errBadDocument marks a stored document that does not decode: no retry
// fixes it (a rebuild does), so the event's change to it is skipped.
var errBadDocument = errors.New("stored document does not decode")

// Resume returns the stream sequence to follow the stream from: the one
// after the checkpoint.
func (p *Projector) Resume(ctx context.Context) (uint64, error) {
	b, _, err := p.Store.Get(ctx, p.Checkpoint)
	if err != nil {
		return 0, fmt.Errorf("read %s: %w", p.Checkpoint, err)
	}
	if b == nil {
		return 1, nil
	}
	seq, err := strconv.ParseUint(string(b), 10, 64)
	if err != nil {
		p.Log.Error("checkpoint does not parse; following the stream from its start", "key", p.Checkpoint, "err", err)
		return 1, nil
	}
	p.mu.Lock()
	p.advance(seq)
	p.mu.Unlock()
	return seq + 1, nil
}

// Apply is a consume.FollowHandler: it applies evs in order and writes
// every document they changed, once each, retrying in place (with
// backoff, the lock released in between) until that succeeds or ctx
// ends; then it moves the checkpoint to last. An event that can never be
// applied (malformed, of an unknown type, touching a stored document that
// does not decode, or panicking) is logged and skipped, so one bad event
// neither stops the projection nor takes the service down.
func (p *Projector) Apply(ctx context.Context, evs []*consume.Event, last uint64) {
	skip := map[uint64]bool{}
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		err := p.applyBatch(ctx, evs, last, skip)
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			p.Log.Warn("stopping with a batch not written; the next start applies it again", "to_seq", last, "err", err)
			return
		}
		if attempt%20 == 2 {
			p.Log.Warn("projection write failed; retrying", "to_seq", last, "attempt", attempt, "err", err)
		}
		if events.IsMissing(err) && p.Heal != nil {
			if herr := p.Heal(ctx); herr != nil {
				p.Log.Error("cannot re-create the projection's bucket yet", "err", herr)
			}
		}
		if attempt == 1 {
			continue // at once: most often a document another writer changed, now read again
		}
		select {
		case <-ctx.Done():
		case <-time.After(delay):
		}
		delay = min(2*delay, 5*time.Second)
	}
}

func (p *Projector) applyBatch(ctx context.Context, evs []*consume.Event, last uint64, skip map[uint64]bool) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, ev := range evs {
		if skip[ev.Stream] {
			continue
		}
		err, panicked := p.safeApply(ctx, ev)
		switch {
		case panicked:
			// What it changed before panicking is unknown: start over
			// without it.
			skip[ev.Stream] = true
			p.forget()
			return err
		case err == nil:
		case unprojectable(err):
			p.Log.Error("skipping an event that cannot be projected", "subject", ev.Subject, "stream_seq", ev.Stream, "type", ev.Type, "err", err)
		default:
			p.drop()
			return err
		}
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	p.advance(last)
	if p.Checkpoint != "" {
		if err := p.Store.Mark(ctx, p.Checkpoint, strconv.AppendUint(nil, last, 10)); err != nil {
			p.Log.Warn("checkpoint write failed; a restart applies more events again (each is counted once)", "err", err)
		}
	}
	return nil
}

// unprojectable says an event's error is one no retry fixes.
func unprojectable(err error) bool {
	return errors.Is(err, events.ErrMalformed) || errors.Is(err, events.ErrUnknownType) || errors.Is(err, errBadDocument)
}

func (p *Projector) safeApply(ctx context.Context, ev *consume.Event) (err error, panicked bool) {
	defer func() {
		if r := recover(); r != nil {
			err, panicked = fmt.Errorf("event %d (%s): panic: %v", ev.Stream, ev.Type, r), true
			p.Log.Error("skipping an event whose projection panicked", "subject", ev.Subject, "stream_seq", ev.Stream, "type", ev.Type, "panic", r)
		}
	}()
	return p.apply(ctx, ev), false
}

// flush writes every dirty document once. If any write fails, every
// document the batch changed is dropped from the cache, to be read again.
func (p *Projector) flush(ctx context.Context) error {
	if err := p.writeDirty(ctx); err != nil {
		return err
	}
	for len(p.removals) > 0 {
		if err := p.Store.RemoveWorkflow(ctx, p.removals[0]); err != nil {
			err = fmt.Errorf("remove the documents of pruned workflow %s: %w", p.removals[0], err)
			p.removals = nil // the batch, applied again, asks again
			return err
		}
		p.removals = p.removals[1:]
	}
	return nil
}

// writeDirty writes every dirty document once.
func (p *Projector) writeDirty(ctx context.Context) error {
	if len(p.dirty) == 0 {
		return nil
	}
	// In the order of each document's last change: the writes are stored
	// in the order sent, so whoever reads a document in the state an event
	// left it in finds every earlier event's effects too (the workflow's
	// summary, ended, comes after its formulas and nodes).
	sort.Slice(p.dirty, func(i, j int) bool { return p.cache[p.dirty[i]].last < p.cache[p.dirty[j]].last })
	ws := make([]Write, 0, len(p.dirty))
	for _, k := range p.dirty {
		b, err := json.Marshal(p.cache[k].val)
		if err != nil {
			p.drop()
			return fmt.Errorf("encode %s: %w", k, err)
		}
		ws = append(ws, Write{Key: k, Val: b, Rev: p.cache[k].rev})
	}
	fctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	p.Store.PutAll(fctx, ws)
	cancel()
	var errs []error
	for _, w := range ws {
		if w.Err != nil {
			errs = append(errs, fmt.Errorf("write %s: %w", w.Key, w.Err))
		}
	}
	if len(errs) > 0 {
		p.drop()
		p.fresh = nil // a create may have failed because one was wrong
		return errors.Join(errs...)
	}
	for _, w := range ws {
		c := p.cache[w.Key]
		c.rev, c.dirty = w.NewRev, false
	}
	p.dirty = p.dirty[:0]
	if len(p.cache) >= maxCached {
		p.forget() // a bound; what is dropped is read again
	}
	return nil
}

// drop forgets every document changed since the last flush: the batch,
// applied again, reads them from the store.
func (p *Projector) drop() {
	for _, k := range p.dirty {
		delete(p.cache, k)
	}
	p.dirty = p.dirty[:0]
	p.removals = nil
}

func (p *Projector) apply(ctx context.Context, ev *consume.Event) error {
	if ev.Type == events.TypeWorkflowPruned {
		var w events.WorkflowPruned
		if err := events.DecodeData(ev.Envelope, &w); err != nil {
			return err
		}
		p.pruned(&w)
		p.sawPruned = true
		return nil
	}
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
		if ok, err := p.onItsHost(ctx, n.Ref); !ok || err != nil {
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
	case events.FamilyProgress:
		var e events.ProgressEvent
		if err := events.DecodeData(ev.Envelope, &e); err != nil {
			return err
		}
		return p.progress(ctx, ev, &e)
	}
	return nil
}

// get returns a document (nil when absent) and its revision, from the
// cache or else the store. When fresh, a document of a workflow this
// projector has seen start is absent unless cached: it created every one
// of them. That saves a read for each new document; if it is ever wrong,
// the write that creates the document fails (revision 0 on an existing
// key) and the batch is applied again from reads.
func get[T any](ctx context.Context, p *Projector, key string, fresh bool) (*T, uint64, error) {
	if c, ok := p.cache[key]; ok {
		if c.val == nil {
			return nil, 0, nil
		}
		return c.val.(*T), c.rev, nil
	}
	if fresh && p.fresh[workflowOf(key)] {
		p.remember(key, nil, 0)
		return nil, 0, nil
	}
	b, rev, err := p.Store.Get(ctx, key)
	if err != nil {
		return nil, 0, fmt.Errorf("read %s: %w", key, err)
	}
	if b == nil {
		p.remember(key, nil, 0)
		return nil, 0, nil
	}
	v := new(T)
	if err := json.Unmarshal(b, v); err != nil {
		return nil, 0, fmt.Errorf("%s: %w: %w", key, errBadDocument, err)
	}
	p.remember(key, v, rev)
	return v, rev, nil
}

// workflowOf returns the workflow id of a wf.<id>[.<formula>[.<node>]] key.
func workflowOf(key string) string {
	rest, ok := strings.CutPrefix(key, "wf.")
	if !ok {
		return ""
	}
	id, _, _ := strings.Cut(rest, ".")
	return id
}

// remember caches a document as read (val nil: absent).
func (p *Projector) remember(key string, val any, rev uint64) {
	if p.cache == nil {
		p.cache = map[string]*cached{}
	}
	p.cache[key] = &cached{val: val, rev: rev}
}

// forget drops everything cached: the store is read again.
func (p *Projector) forget() {
	p.cache, p.fresh, p.dirty, p.removals = nil, nil, p.dirty[:0], nil
}

// pruned forgets a pruned workflow's documents, cached or to be written,
// and removes them from the store with the batch's writes. The state-store
// keeps nothing of it but what the per-host projection (host.*) holds.
func (p *Projector) pruned(ev *events.WorkflowPruned) {
	id := ev.WorkflowID
	for k := range p.cache {
		if workflowOf(k) == id {
			delete(p.cache, k)
		}
	}
	p.dirty = slices.DeleteFunc(p.dirty, func(k string) bool { return workflowOf(k) == id })
	delete(p.fresh, id)
	if !slices.Contains(p.removals, id) {
		p.removals = append(p.removals, id)
	}
}

// put records v as key's new value, to be written over revision rev at
// the next flush.
func (p *Projector) put(_ context.Context, key string, v any, rev uint64) error {
	if p.cache == nil {
		p.cache = map[string]*cached{}
	}
	c := p.cache[key]
	if c == nil {
		c = &cached{}
		p.cache[key] = c
	}
	c.val, c.rev = v, rev
	p.puts++
	c.last = p.puts
	if !c.dirty {
		c.dirty = true
		p.dirty = append(p.dirty, key)
	}
	return nil
}

// workflowDoc loads (or starts) a workflow's summary; ok is false when the
// event was already applied (its stream sequence, or its id: a copy stored
// again).
func (p *Projector) workflowDoc(ctx context.Context, ev *consume.Event, r events.Ref) (*events.WorkflowDoc, uint64, bool, error) {
	doc, rev, err := get[events.WorkflowDoc](ctx, p, WorkflowDocKey(r.WorkflowID), true)
	if err != nil {
		return nil, 0, false, err
	}
	if doc == nil {
		// Nothing of this workflow has been projected: its documents
		// are all new (see get).
		if p.fresh == nil {
			p.fresh = map[string]bool{}
		}
		p.fresh[r.WorkflowID] = true
		doc = &events.WorkflowDoc{WorkflowID: r.WorkflowID, Workflow: r.Workflow, Operation: r.Operation, Status: dag.WorkflowAccepted,
			Generation: r.Generation, CreatedAt: ev.Time}
	}
	if ev.Stream <= doc.LastSeq || slices.Contains(doc.EventIDs, ev.ID) {
		return nil, 0, false, nil // applied already, or a copy of one applied
	}
	return doc, rev, true, nil
}

// workflow applies a workflow transition that is not behind the
// workflow's state (dag.CompareWorkflow): a late running or paused of a
// run that has ended, or an event of an earlier generation, changes
// nothing.
func (p *Projector) workflow(ctx context.Context, ev *consume.Event, w *events.WorkflowEvent) error {
	doc, rev, ok, err := p.workflowDoc(ctx, ev, w.Ref)
	if !ok || err != nil {
		return err
	}
	if dag.CompareWorkflow(dag.WorkflowMark{Generation: doc.Generation, State: doc.Status}, w.Mark()) == dag.Behind {
		return nil
	}
	doc.LastSeq, doc.UpdatedAt, doc.Generation = ev.Stream, ev.Time, w.Generation
	doc.EventIDs = append(doc.EventIDs, ev.ID)
	if n := len(doc.EventIDs); n > events.MaxWorkflowEventIDs {
		doc.EventIDs = append([]string(nil), doc.EventIDs[n-events.MaxWorkflowEventIDs:]...)
	}
	doc.Status = w.Status
	doc.Error = w.Error
	doc.EndedAt = w.EndedAt
	if w.Status == dag.WorkflowAccepted {
		doc.CreatedAt, doc.Vars = ev.Time, dag.ShownVars(w.Vars) // masked again: whoever published it
	}
	if n := sum(w.Formulas); n > 0 {
		doc.FormulaCount, doc.NodeCount = n, w.TotalNodes
	}
	recordRequest(doc, ev, w)
	return p.put(ctx, WorkflowDocKey(w.WorkflowID), doc, rev)
}

// recordRequest keeps who asked for a transition: the submitter, and each
// control request (workflowDoc has already skipped a redelivery).
func recordRequest(doc *events.WorkflowDoc, ev *consume.Event, w *events.WorkflowEvent) {
	if w.RequestedBy == nil {
		return
	}
	if w.Status == dag.WorkflowAccepted {
		doc.SubmittedBy = w.RequestedBy
		return
	}
	doc.Requests = append(doc.Requests, events.Request{Status: w.Status, Reason: w.Reason, By: *w.RequestedBy, At: ev.Time})
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
	f, rev, err := get[events.FormulaDoc](ctx, p, FormulaDocKey(r.WorkflowID, r.Formula), true)
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

// formula applies a formula transition that is not behind the formula's
// state (dag.CompareFormula): a running stored again after the formula
// ended, or the planner's word that no executor has taken its work
// (ready) stored after an executor took it, changes nothing.
func (p *Projector) formula(ctx context.Context, ev *consume.Event, e *events.FormulaEvent) error {
	cur, _, err := get[events.FormulaDoc](ctx, p, FormulaDocKey(e.WorkflowID, e.Formula), true)
	if err != nil {
		return err
	}
	if cur != nil && dag.CompareFormula(dag.FormulaMark{Generation: cur.Generation, State: cur.Status}, e.Mark()) == dag.Behind {
		return nil
	}
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
	return p.put(ctx, FormulaDocKey(e.WorkflowID, e.Formula), f, rev)
}

// onItsHost says whether a node event is about the host its formula runs
// on, as the formula's document (made from the planner's first event of
// it) records: a node event under another host's subject and data
// (events.Admit lets it through: they agree) is not applied, to either
// projection, and is logged.
func (p *Projector) onItsHost(ctx context.Context, r events.Ref) (bool, error) {
	f, _, err := get[events.FormulaDoc](ctx, p, FormulaDocKey(r.WorkflowID, r.Formula), false)
	if err != nil || f == nil || f.Host == "" || f.Host == r.Host {
		return err == nil, err
	}
	p.Log.Warn("event refused: about another host than its formula's", "security", true, "workflow_id", r.WorkflowID,
		"formula", r.Formula, "node", r.Node, "host", r.Host, "formula_host", f.Host)
	return false, nil
}

// node applies a node transition that is not behind the node's last one
// (dag.CompareNode): a running stored after the attempt's end, or a late
// event of an earlier attempt or generation, changes nothing; one at the
// same place (stored twice, or an attempt announced again) updates what
// it says but is not counted again.
func (p *Projector) node(ctx context.Context, ev *consume.Event, e *events.NodeEvent) error {
	// An event of an older generation than its formula has reached is late.
	// (read, not assumed: no write would show an assumption wrong)
	if f, _, err := get[events.FormulaDoc](ctx, p, FormulaDocKey(e.WorkflowID, e.Formula), false); err != nil {
		return err
	} else if f != nil && e.Generation < f.Generation {
		return nil
	}
	key := NodeDocKey(e.WorkflowID, e.Formula, e.Node)
	n, rev, err := get[events.NodeDoc](ctx, p, key, true)
	if err != nil {
		return err
	}
	if n == nil {
		n = &events.NodeDoc{Status: dag.NodePending}
	}
	if ev.Stream <= n.LastSeq {
		return nil
	}
	mark := e.Mark()
	order := dag.CompareNode(n.LastMark(), mark)
	if order == dag.Behind {
		return nil // late, or stored again: the node has moved on
	}
	n.LastSeq, n.Generation, n.Mark = ev.Stream, e.Generation, &mark
	if order != dag.Same { // the same place again is not a transition
		n.Transitions++
	}
	n.Operation = e.Operation
	if e.Status == dag.NodeRunning && order != dag.Same && (e.Attempt != n.LastAttempt || n.Status != dag.NodeRunning) {
		// A new attempt. (One announced again, as while it waits for its
		// host lock, is the same attempt.)
		n.Attempts++
		n.LastAttempt = e.Attempt
		n.StartedAt, n.EndedAt, n.ExitCode, n.Error, n.Progress = e.StartedAt, nil, nil, "", 0
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
	n.Blocker, n.Check, n.Reason = e.Blocker, e.Check, e.Reason
	if e.SpecHash != "" {
		n.SpecHash = e.SpecHash
	}
	return p.put(ctx, key, n, rev)
}

// progress keeps a node's last reported percent, of its attempt while it
// runs only: one of an earlier attempt or generation, one stored after the
// attempt ended, or one already applied, is ignored. It is not a
// transition: the counts stay as they are.
func (p *Projector) progress(ctx context.Context, ev *consume.Event, e *events.ProgressEvent) error {
	key := NodeDocKey(e.WorkflowID, e.Formula, e.Node)
	n, rev, err := get[events.NodeDoc](ctx, p, key, false)
	if err != nil || n == nil {
		return err // nothing of the node yet: its running comes first
	}
	if m := n.LastMark(); ev.Stream <= n.LastSeq || m.State != dag.NodeRunning || e.Generation != m.Generation || e.Attempt != m.Attempt {
		return nil // not of the attempt running now (one stored after its end)
	}
	n.LastSeq, n.Progress = ev.Stream, e.Percent
	return p.put(ctx, key, n, rev)
}

func (p *Projector) hostNode(ctx context.Context, ev *consume.Event, e *events.NodeEvent) error {
	key := events.HostNodeKey(e.Ref.Host, e.Workflow, e.Formula, e.Node)
	hn, rev, err := get[events.HostNode](ctx, p, key, false)
	if err != nil {
		return err
	}
	if hn == nil || hn.Host != e.Ref.Host {
		// None yet, or one of another host whose name has the same host
		// token (a composition that renamed web_1 to web.1): this host's
		// record starts here.
		hn = &events.HostNode{Host: e.Ref.Host, Workflow: e.Workflow, Formula: e.Formula, Node: e.Node, Status: dag.NodePending}
	}
	if ev.Stream <= hn.LastSeq {
		return nil
	}
	order := dag.CompareNode(lastOf(hn, e.WorkflowID), e.Mark())
	if order == dag.Behind || order == dag.Same && !lastIsOf(hn, e.WorkflowID) {
		return nil // late, or stored again: the workflow's run of the node (or the node) has moved on
	}
	hn.LastSeq = ev.Stream
	if e.Operation == dag.OpCheck {
		check(hn, e)
	} else {
		transition(hn, e)
	}
	if order == dag.Same {
		return p.put(ctx, key, hn, rev) // not a transition of its own: not logged again
	}
	hn.Log = append(hn.Log, events.HostLogEntry{Time: ev.Time, Event: ev.Type, WorkflowID: e.WorkflowID, Operation: e.Operation, Status: e.Status, Attempt: e.Attempt, Error: e.Error,
		Generation: e.Generation, WillRetry: e.WillRetry && e.Status == dag.NodeFailed})
	if len(hn.Log) > events.MaxHostLog {
		hn.Log = append([]events.HostLogEntry(nil), hn.Log[len(hn.Log)-events.MaxHostLog:]...)
	}
	return p.put(ctx, key, hn, rev)
}

// lastOf is where workflow id's last transition of a host node stands,
// from its log (the zero mark when the log has none of it: everything of
// it is ahead). Transitions of different workflows follow the stream's
// order.
func lastOf(hn *events.HostNode, id string) dag.NodeMark {
	for i := len(hn.Log) - 1; i >= 0; i-- {
		if hn.Log[i].WorkflowID == id {
			return hn.Log[i].Mark()
		}
	}
	return dag.NodeMark{}
}

// lastIsOf says whether a host node's last transition is workflow id's.
func lastIsOf(hn *events.HostNode, id string) bool {
	return len(hn.Log) > 0 && hn.Log[len(hn.Log)-1].WorkflowID == id
}

// check records a transition of an operation: check run: what the check
// found, apart from the node's create and delete transitions, since it
// did nothing to the node.
func check(hn *events.HostNode, e *events.NodeEvent) {
	c := &events.HostCheck{Status: e.Status, Result: e.Check, SpecHash: e.SpecHash, WorkflowID: e.WorkflowID, EndedAt: e.EndedAt, Error: e.Error}
	if e.WillRetry {
		c.Status = dag.NodeRunning
	}
	if c.Status != dag.NodeSucceeded {
		c.Result = "" // a verdict comes only with succeeded
	}
	hn.Check = c
}

// transition applies a create or delete transition.
func transition(hn *events.HostNode, e *events.NodeEvent) {
	prev := hn.Status
	// Every transition counts: a node blocked or cancelled shows so.
	hn.Status, hn.Blocker = e.Status, e.Blocker
	if e.WillRetry { // failed, but the node is still at work
		hn.Status = dag.NodeRunning
	}
	// Of the workflow that made the transition, whoever published it (the
	// planner blocks and cancels nodes that never started: no actor).
	hn.Operation, hn.WorkflowID, hn.Actor = e.Operation, e.WorkflowID, e.Actor
	if e.SpecHash != "" {
		hn.SpecHash = e.SpecHash
	}
	switch {
	case e.Status == dag.NodeRunning:
		// A running without a start of its own (an attempt announced
		// again, waiting for its host lock) keeps the attempt's.
		if e.StartedAt != nil || prev != dag.NodeRunning {
			hn.StartedAt = e.StartedAt
		}
		hn.EndedAt = nil
	case (e.Status == dag.NodeBlocked || e.Status == dag.NodeCancelled) && prev != dag.NodeRunning:
		// It did not start: the times are this transition's own.
		hn.StartedAt, hn.EndedAt = e.StartedAt, e.EndedAt
	default:
		if e.StartedAt != nil {
			hn.StartedAt = e.StartedAt
		}
		if e.EndedAt != nil {
			hn.EndedAt = e.EndedAt
		}
	}
	inPlace(hn, e)
}

// inPlace keeps what a create left on the host: set by a create that
// completed the node, removed by a create or delete that runs it again,
// fails or deletes it. A node blocked or cancelled before it started was
// not touched (one cancelled while running was: its running removed it).
func inPlace(hn *events.HostNode, e *events.NodeEvent) {
	switch {
	case e.Status == dag.NodeBlocked || e.Status == dag.NodeCancelled:
	case e.Operation == dag.OpCreate && e.Status.Done():
		hn.InPlace = &events.InPlace{Status: e.Status, SpecHash: hn.SpecHash, WorkflowID: e.WorkflowID, EndedAt: hn.EndedAt}
	default:
		hn.InPlace = nil
	}
}

func (p *Projector) health(ctx context.Context, ev *consume.Event, h *events.HealthEvent) error {
	f, rev, ok, err := p.formulaDoc(ctx, ev, h.Ref)
	if !ok || err != nil {
		return err
	}
	f.Health = &events.HealthDoc{Status: h.Status, Attempts: h.Attempt, Final: h.Final, Output: h.OutputTail, Error: h.Error, ExitCode: h.ExitCode}
	return p.put(ctx, FormulaDocKey(h.WorkflowID, h.Formula), f, rev)
}
