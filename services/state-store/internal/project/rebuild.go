package project

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/consume"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Replay builds the projection from the event stream into memory, applying
// every event the stream still holds up to stream sequence upTo (0: the
// whole stream). first is the first sequence the stream holds: events
// before it are gone. pruned says the stream held a pruned event: the
// events of a pruned workflow are gone from the middle of it. audit, when
// not nil, observes every event applied.
func Replay(ctx context.Context, js jetstream.JetStream, upTo uint64, audit *Audit) (mem *MemStore, first uint64, pruned bool, err error) {
	mem = NewMemStore()
	p := &Projector{Store: mem, audit: audit}
	if first, err = p.replay(ctx, js, upTo); err != nil {
		return nil, 0, false, err
	}
	if err := p.flush(ctx); err != nil {
		return nil, 0, false, fmt.Errorf("replay: %w", err)
	}
	return mem, first, p.sawPruned, nil
}

func (p *Projector) replay(ctx context.Context, js jetstream.JetStream, upTo uint64) (uint64, error) {
	info, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return 0, fmt.Errorf("replay: %w", err)
	}
	st := info.CachedInfo().State
	if upTo == 0 || upTo > st.LastSeq {
		upTo = st.LastSeq
	}
	if st.Msgs == 0 || st.FirstSeq > upTo {
		return st.FirstSeq, nil // nothing left to replay
	}
	return st.FirstSeq, p.replayRange(ctx, js, upTo)
}

func (p *Projector) replayRange(ctx context.Context, js jetstream.JetStream, upTo uint64) error {
	cons, err := js.OrderedConsumer(ctx, events.StreamEvents, jetstream.OrderedConsumerConfig{})
	if err != nil {
		return fmt.Errorf("replay: %w", err)
	}
	for {
		batch, err := cons.Fetch(500, jetstream.FetchMaxWait(2e9))
		if err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return fmt.Errorf("replay: %w", err)
			}
			seq := meta.Sequence.Stream
			if seq > upTo {
				return nil
			}
			// What the live projection refused (events.Admit: forged or
			// misrouted; it logged and counted it) a replay refuses too.
			if env, err := events.Parse(m.Data()); err == nil && events.Admit(m.Subject(), env) == nil {
				if p.audit != nil {
					p.audit.Observe(seq, env)
				}
				ev := &consume.Event{Envelope: env, Subject: m.Subject(), Stream: seq}
				if err := p.apply(ctx, ev); err != nil && !unprojectable(err) {
					return fmt.Errorf("replay at %d: %w", seq, err)
				}
			}
			if seq == upTo {
				return nil
			}
		}
		if err := batch.Error(); err != nil {
			return fmt.Errorf("replay: %w", err)
		}
		if n == 0 {
			return nil // the rest was purged or expired while replaying
		}
	}
}

// CatchUp waits until every event the stream holds now is applied. A
// stream that holds none (purged) has nothing to wait for, whatever its
// last sequence: the events up to it are gone, not on their way.
func (p *Projector) CatchUp(ctx context.Context, js jetstream.JetStream) error {
	info, err := js.Stream(ctx, events.StreamEvents)
	if err != nil {
		return err
	}
	st := info.CachedInfo().State
	if st.Msgs == 0 {
		return nil
	}
	return p.Await(ctx, st.LastSeq)
}

// Skip records that every event up to stream sequence seq is handled:
// they were removed from the stream before the projection applied them.
func (p *Projector) Skip(ctx context.Context, seq uint64) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.write(ctx); err != nil {
		return fmt.Errorf("skip to %d: %w", seq, err)
	}
	p.advance(seq)
	if p.Checkpoint == "" {
		return nil
	}
	if err := p.Store.Mark(ctx, p.Checkpoint, strconv.AppendUint(nil, p.applied, 10)); err != nil {
		return fmt.Errorf("skip to %d: %w", seq, err)
	}
	return nil
}

// RebuildReport says how the live projection compares with a replay.
type RebuildReport = events.RebuildReport

// noResponderTries and noResponderPause bound retryNoResponders.
var (
	noResponderTries = 10
	noResponderPause = 500 * time.Millisecond
)

// retryNoResponders runs f again while it fails with no responders: on a
// NATS cluster, the node a replica is connected to answers no JetStream API
// request for a few seconds after it has started again (its JetStream is
// still catching up), which is no reason to fail a rebuild or its check.
func retryNoResponders(ctx context.Context, f func() error) error {
	var err error
	for i := 0; i < noResponderTries; i++ {
		if err = f(); err == nil || !errors.Is(err, nats.ErrNoResponders) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(noResponderPause):
		}
	}
	return err
}

// Rebuild replays the stream up to the last event the live projector
// handled, compares, and unless checkOnly replaces the live documents.
// Events wait while it runs. It also reports what is wrong in the stream
// itself (Audit: events stored twice, transitions out of order, and, with
// Records, nodes the executors recorded otherwise).
func (p *Projector) Rebuild(ctx context.Context, js jetstream.JetStream, checkOnly bool) (*RebuildReport, error) {
	docs, ok := p.Store.(Rewritable)
	if !ok {
		return nil, errors.New("rebuild: the projection's store cannot be rewritten")
	}
	// First catch up with the stream as it is now, so that the comparison
	// is with what every state-store replica has written.
	if err := retryNoResponders(ctx, func() error { return p.CatchUp(ctx, js) }); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.write(ctx); err != nil {
		return nil, fmt.Errorf("rebuild: %w", err)
	}
	var mem *MemStore
	var first uint64
	var pruned bool
	var audit *Audit
	err := retryNoResponders(ctx, func() (err error) {
		audit = NewAudit()
		mem, first, pruned, err = Replay(ctx, js, p.applied, audit)
		return err
	})
	if err != nil {
		return nil, err
	}
	if p.Records != nil {
		if err := audit.Records(ctx, mem, p.Records); err != nil {
			return nil, fmt.Errorf("rebuild: %w", err)
		}
	}
	live, err := docs.Values(ctx, ">")
	if err != nil {
		return nil, fmt.Errorf("rebuild: read the projection: %w", err)
	}
	for k := range live {
		if !strings.HasPrefix(k, "wf.") && !strings.HasPrefix(k, "host.") {
			delete(live, k)
		}
	}
	rep := &RebuildReport{Keys: len(mem.Vals), UpTo: p.applied, Differing: []string{}, FirstSeq: first, Workflows: audit.Workflows()}
	rep.Findings = audit.Findings()
	if n := len(rep.Findings); n > events.MaxFindings {
		rep.Findings, rep.MoreFindings = rep.Findings[:events.MaxFindings], n-events.MaxFindings
	}
	for k, v := range mem.Vals {
		if !sameDocument(k, v, live[k]) {
			rep.Differing = append(rep.Differing, k)
		}
	}
	for k := range live {
		if _, ok := mem.Vals[k]; !ok {
			rep.Differing = append(rep.Differing, k)
		}
	}
	sort.Strings(rep.Differing)
	rewrite := rep.Differing
	if (first > 1 || pruned) && p.applied > 0 {
		// Events are gone: a replay cannot stand for what they built.
		// Only documents the projection lacks are written; the others
		// are kept as they are.
		if first > 1 {
			rep.Lost = fmt.Sprintf("events 1-%d are no longer in %s (purged, or older than its age limit): the documents they built cannot be rebuilt, and are kept as they are", first-1, events.StreamEvents)
		} else {
			rep.Lost = fmt.Sprintf("the events of pruned workflows are no longer in %s: the per-host documents they built cannot be rebuilt, and are kept as they are", events.StreamEvents)
		}
		rewrite = nil
		for _, k := range rep.Differing {
			if _, ok := live[k]; ok {
				rep.Kept = append(rep.Kept, k)
			} else {
				rewrite = append(rewrite, k)
			}
		}
	}
	if checkOnly || len(rewrite) == 0 {
		return rep, nil
	}
	if err := docs.RewriteAll(ctx, rewrite, mem.Vals); err != nil {
		return nil, err
	}
	p.forget()
	rep.Rewritten = true
	return rep, nil
}

// sameDocument says whether two values of key are the same document: a
// workflow's summary whatever page count it keeps (Pages keeps the one
// its documents were placed by; a replay has its own).
func sameDocument(key string, a, b []byte) bool {
	if id, ok := strings.CutPrefix(key, "wf."); ok && !strings.Contains(id, ".") {
		a, b = withoutPages(a), withoutPages(b)
	}
	return sameJSON(a, b)
}

// withoutPages is a summary without its page count.
func withoutPages(b []byte) []byte {
	var doc map[string]json.RawMessage
	if b == nil || json.Unmarshal(b, &doc) != nil {
		return b
	}
	delete(doc, "pages")
	out, err := json.Marshal(doc)
	if err != nil {
		return b
	}
	return out
}

func sameJSON(a, b []byte) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var x, y any
	if json.Unmarshal(a, &x) != nil || json.Unmarshal(b, &y) != nil {
		return false
	}
	return reflect.DeepEqual(x, y)
}

// Rebase makes the projection follow a re-created event stream. Every
// document's stream positions (last_seq) and the checkpoint refer to the
// deleted stream, whose sequence numbers the new one starts again, so
// they are set to 0; the documents keep what they say. The caller then
// follows the new stream from its first event. It returns how many
// documents it rewrote.
func (p *Projector) Rebase(ctx context.Context, kv jetstream.KeyValue) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if err := p.write(ctx); err != nil {
		return 0, fmt.Errorf("rebase: %w", err)
	}
	lister, err := kv.ListKeys(ctx)
	if err != nil && !errors.Is(err, jetstream.ErrNoKeysFound) {
		return 0, fmt.Errorf("rebase: %w", err)
	}
	n := 0
	if err == nil {
		for k := range lister.Keys() {
			if k == p.Checkpoint {
				continue
			}
			if err := rebaseKey(ctx, kv, k); err != nil {
				return n, fmt.Errorf("rebase %s: %w", k, err)
			}
			n++
		}
	}
	if p.Checkpoint != "" {
		if _, err := kv.Put(ctx, p.Checkpoint, []byte("0")); err != nil {
			return n, fmt.Errorf("rebase: checkpoint: %w", err)
		}
	}
	p.forget()
	p.applied = 0
	p.pos.Lock()
	p.pos.seq, p.pos.want = 0, 0
	p.pos.Unlock()
	return n, nil
}

func rebaseKey(ctx context.Context, kv jetstream.KeyValue, k string) error {
	e, err := kv.Get(ctx, k)
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var doc any
	if err := json.Unmarshal(e.Value(), &doc); err != nil {
		return nil // not a document of ours: left alone
	}
	zeroSeqs(doc)
	b, err := json.Marshal(doc)
	if err != nil {
		return err
	}
	_, err = kv.Update(ctx, k, b, e.Revision())
	return err
}

// zeroSeqs sets every "last_seq" in a decoded document to 0.
func zeroSeqs(v any) {
	switch t := v.(type) {
	case map[string]any:
		for k, x := range t {
			if k == "last_seq" {
				t[k] = 0
				continue
			}
			zeroSeqs(x)
		}
	case []any:
		for _, x := range t {
			zeroSeqs(x)
		}
	}
}
