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
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
)

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
	// applied is the highest stream sequence handled (applied to the
	// cache; written once nothing is held).
	applied uint64
	// Hold is how long a batch's writes may wait for the next batches'
	// (0: written at once). held are the events applied to the cache and
	// not yet written, up to stream sequence heldTo; skip, those of them
	// that panicked; timer writes them Hold after the first; holdCtx is
	// the context it writes them with.
	Hold    time.Duration
	held    []*consume.Event
	heldTo  uint64
	skip    map[uint64]bool
	timer   *time.Timer
	holdCtx context.Context
	// stale: the cache lost (drop, forget) effects of held events, which
	// are applied again before they are written.
	stale bool
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
		want  uint64        // the highest sequence a reader awaits
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
		asked := seq > p.pos.want
		p.pos.want = max(p.pos.want, seq)
		p.pos.Unlock()
		if asked {
			// Held events this read waits for are written now; the ones
			// still to come are written as they come (holds).
			go p.writeHeld()
		}
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

// Apply is a consume.FollowHandler: it applies evs in order to the
// cached documents and writes every document they changed, once each,
// retrying in place (with backoff, the lock released in between) until
// that succeeds or ctx ends; then it moves the checkpoint to last. With
// Hold, the writes of a batch wait up to Hold for the next batches', so
// that a document that several batches change is written once (a read
// does not wait for them: Await writes at once). An event that can never
// be applied (malformed, of an unknown type, touching a stored document
// that does not decode, or panicking) is logged and skipped, so one bad
// event neither stops the projection nor takes the service down.
func (p *Projector) Apply(ctx context.Context, evs []*consume.Event, last uint64) {
	p.mu.Lock()
	p.held = append(p.held, evs...)
	p.heldTo = max(p.heldTo, last)
	p.applied = max(p.applied, last)
	var err error
	if p.stale {
		err = p.refold(ctx)
	} else {
		err = p.fold(ctx, evs)
	}
	if err == nil && p.holds(last) {
		p.holdCtx = ctx
		if p.timer == nil {
			p.timer = time.AfterFunc(p.Hold, p.writeHeld)
		}
		p.mu.Unlock()
		return
	}
	p.mu.Unlock()
	p.commit(ctx)
}

// maxHeld bounds the events whose writes wait (Hold).
const maxHeld = 4096

// holds says whether the writes of the events up to last may wait: Hold
// is set, not too many events wait, and no read waits for them.
func (p *Projector) holds(last uint64) bool {
	if p.Hold <= 0 || len(p.held) >= maxHeld {
		return false
	}
	p.pos.Lock()
	defer p.pos.Unlock()
	return p.pos.want <= p.pos.seq || p.pos.want > last
}

// writeHeld writes what waits (the Hold timer, or a read that waits).
func (p *Projector) writeHeld() {
	p.mu.Lock()
	ctx := p.holdCtx
	p.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	p.commit(ctx)
}

// commit writes what the held events changed and moves the checkpoint
// past them, retrying until that succeeds or ctx ends (after a failed
// write, the events are applied again over fresh reads).
func (p *Projector) commit(ctx context.Context) {
	delay := 50 * time.Millisecond
	for attempt := 1; ; attempt++ {
		p.mu.Lock()
		err := p.write(ctx)
		to := p.heldTo
		p.mu.Unlock()
		if err == nil {
			return
		}
		if ctx.Err() != nil {
			p.Log.Warn("stopping with a batch not written; the next start applies it again", "to_seq", to, "err", err)
			return
		}
		if attempt%20 == 2 {
			p.Log.Warn("projection write failed; retrying", "to_seq", to, "attempt", attempt, "err", err)
		}
		if eventbus.IsMissing(err) && p.Heal != nil {
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

// write writes, under p.mu, every document the held events changed and
// then the checkpoint past them; a cache that lost their effects (a
// failed write) gets them again first.
func (p *Projector) write(ctx context.Context) error {
	if p.timer != nil {
		p.timer.Stop()
		p.timer = nil
	}
	if len(p.held) == 0 && p.heldTo == 0 {
		return nil // written already
	}
	if p.stale {
		if err := p.refold(ctx); err != nil {
			return err
		}
	}
	if err := p.flush(ctx); err != nil {
		return err
	}
	last := p.heldTo
	clear(p.held)
	p.held, p.heldTo, p.skip, p.stale = p.held[:0], 0, nil, false
	if p.Checkpoint != "" {
		if err := p.Store.Mark(ctx, p.Checkpoint, strconv.AppendUint(nil, last, 10)); err != nil {
			p.Log.Warn("checkpoint write failed; a restart applies more events again (each is counted once)", "err", err)
		}
	}
	p.advance(last)
	return nil
}

// refold applies every held event again, in order, over documents read
// again (see drop).
func (p *Projector) refold(ctx context.Context) error {
	p.stale = false
	return p.fold(ctx, p.held)
}

// fold applies evs in order to the cached documents. On an error that a
// retry may fix, every document changed since the last write is dropped
// from the cache, to be read again.
func (p *Projector) fold(ctx context.Context, evs []*consume.Event) error {
	for _, ev := range evs {
		if p.skip[ev.Stream] {
			continue
		}
		err, panicked := p.safeApply(ctx, ev)
		switch {
		case panicked:
			// What it changed before panicking is unknown: start over
			// without it.
			if p.skip == nil {
				p.skip = map[uint64]bool{}
			}
			p.skip[ev.Stream] = true
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
	p.stale = true
	for _, k := range p.dirty {
		delete(p.cache, k)
	}
	p.dirty = p.dirty[:0]
	p.removals = nil
}

func (p *Projector) apply(ctx context.Context, ev *consume.Event) error {
	pl, err := ev.Payload()
	if err != nil {
		return err
	}
	switch e := pl.(type) {
	case *events.WorkflowPruned:
		p.pruned(e)
		p.sawPruned = true
	case *events.WorkflowEvent:
		return p.workflow(ctx, ev, e)
	case *events.FormulaEvent:
		return p.formula(ctx, ev, e)
	case *events.NodeEvent:
		if ok, err := p.onItsHost(ctx, e.Ref); !ok || err != nil {
			return err
		}
		if err := p.node(ctx, ev, e); err != nil {
			return err
		}
		return p.hostNode(ctx, ev, e)
	case *events.HealthEvent:
		return p.health(ctx, ev, e)
	case *events.ProgressEvent:
		return p.progress(ctx, ev, e)
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

// remember caches a document as read (val nil: absent).
func (p *Projector) remember(key string, val any, rev uint64) {
	if p.cache == nil {
		p.cache = map[string]*cached{}
	}
	p.cache[key] = &cached{val: val, rev: rev}
}

// forget drops everything cached: the store is read again.
func (p *Projector) forget() {
	p.stale = true
	p.cache, p.fresh, p.dirty, p.removals = nil, nil, p.dirty[:0], nil
	if f, ok := p.Store.(interface{ Forget() }); ok {
		f.Forget() // what it caches of the store (Pages)
	}
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

// The Projector's part of each rule (rules.go): read the documents an
// event is about, fold it in, and put what changed for the next flush.

func (p *Projector) workflow(ctx context.Context, ev *consume.Event, w *events.WorkflowEvent) error {
	key := WorkflowDocKey(w.WorkflowID)
	doc, rev, err := get[events.WorkflowDoc](ctx, p, key, true)
	if err != nil {
		return err
	}
	if doc == nil {
		// Nothing of this workflow has been projected: its documents
		// are all new (see get).
		if p.fresh == nil {
			p.fresh = map[string]bool{}
		}
		p.fresh[w.WorkflowID] = true
		doc = newWorkflowDoc(ev, w.Ref)
		doc.Pages = workflowPages(w)
	}
	if !foldWorkflow(doc, ev, w) {
		return nil
	}
	return p.put(ctx, key, doc, rev)
}

func (p *Projector) formula(ctx context.Context, ev *consume.Event, e *events.FormulaEvent) error {
	key := FormulaDocKey(e.WorkflowID, e.Formula)
	f, rev, err := get[events.FormulaDoc](ctx, p, key, true)
	if err != nil {
		return err
	}
	if f, ok := foldFormula(f, ev, e); ok {
		return p.put(ctx, key, f, rev)
	}
	return nil
}

func (p *Projector) health(ctx context.Context, ev *consume.Event, h *events.HealthEvent) error {
	key := FormulaDocKey(h.WorkflowID, h.Formula)
	f, rev, err := get[events.FormulaDoc](ctx, p, key, true)
	if err != nil {
		return err
	}
	if f, ok := foldHealth(f, ev, h); ok {
		return p.put(ctx, key, f, rev)
	}
	return nil
}

// onItsHost says whether a node event is about the host its formula runs
// on (onOtherHost): a node event under another host's subject and data
// (events.Admit lets it through: they agree) is not applied, to either
// projection, and is logged.
func (p *Projector) onItsHost(ctx context.Context, r events.Ref) (bool, error) {
	f, _, err := get[events.FormulaDoc](ctx, p, FormulaDocKey(r.WorkflowID, r.Formula), false)
	if err != nil || !onOtherHost(f, r) {
		return err == nil, err
	}
	p.Log.Warn("event refused: about another host than its formula's", "security", true, "workflow_id", r.WorkflowID,
		"formula", r.Formula, "node", r.Node, "host", r.Host, "formula_host", f.Host)
	return false, nil
}

func (p *Projector) node(ctx context.Context, ev *consume.Event, e *events.NodeEvent) error {
	// (the formula read, not assumed: no write would show an assumption wrong)
	if f, _, err := get[events.FormulaDoc](ctx, p, FormulaDocKey(e.WorkflowID, e.Formula), false); err != nil {
		return err
	} else if lateForFormula(f, e) {
		return nil
	}
	key := NodeDocKey(e.WorkflowID, e.Formula, e.Node)
	n, rev, err := get[events.NodeDoc](ctx, p, key, true)
	if err != nil {
		return err
	}
	if n, ok := foldNode(n, ev, e); ok {
		return p.put(ctx, key, n, rev)
	}
	return nil
}

func (p *Projector) progress(ctx context.Context, ev *consume.Event, e *events.ProgressEvent) error {
	key := NodeDocKey(e.WorkflowID, e.Formula, e.Node)
	n, rev, err := get[events.NodeDoc](ctx, p, key, false)
	if err != nil || !foldProgress(n, ev, e) {
		return err
	}
	return p.put(ctx, key, n, rev)
}

func (p *Projector) hostNode(ctx context.Context, ev *consume.Event, e *events.NodeEvent) error {
	key := events.HostNodeKey(e.Ref.Host, e.Workflow, e.Formula, e.Node)
	hn, rev, err := get[events.HostNode](ctx, p, key, false)
	if err != nil {
		return err
	}
	if hn, ok := foldHostNode(hn, ev, e); ok {
		return p.put(ctx, key, hn, rev)
	}
	return nil
}
