package project

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// KVStore is the Store on a JetStream KV bucket (gantry_state), and what
// the state.* reads answer from (Keys, Values). Its writes are KV
// publishes with the expected per-key revision, sent asynchronously.
type KVStore struct {
	JS jetstream.JetStream
	KV jetstream.KeyValue
	// Storage, when set, is told how the writes went (they are published
	// without the bucket's own calls, which it observes).
	Storage *eventbus.Storage
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
// at most eventbus.PublishTimeout in all: JetStream does not answer a
// write it cannot store (its disk full), and a wait for ever would stop
// the projection for good.
func (s *KVStore) PutAll(ctx context.Context, ws []Write) {
	futs := make([]jetstream.PubAckFuture, len(ws))
	sent := time.Now()
	for i := range ws {
		m := &nats.Msg{Subject: s.subject(ws[i].Key), Data: ws[i].Val, Header: nats.Header{}}
		futs[i], ws[i].Err = s.JS.PublishMsgAsync(m, jetstream.WithExpectLastSequencePerSubject(ws[i].Rev))
	}
	wctx, cancel := context.WithTimeout(ctx, eventbus.PublishTimeout)
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
	for _, key := range []string{WorkflowDocKey(id), WorkflowDocKey(id) + ".>", pagePrefix + id + ".>", ownPrefix + id + ".>"} {
		if _, err := eventbus.PurgeSubject(ctx, s.JS, stream, s.subject(key)); err != nil {
			return err
		}
	}
	return nil
}

// RewriteAll is a Rewrite of each key.
func (s *KVStore) RewriteAll(ctx context.Context, keys []string, vals map[string][]byte) error {
	return rewriteEach(ctx, s.Rewrite, keys, vals)
}

// Rewrite puts val at key whatever its revision, or deletes key when val
// is nil (a rebuild's).
func (s *KVStore) Rewrite(ctx context.Context, key string, val []byte) error {
	var err error
	if val == nil {
		err = s.KV.Delete(ctx, key)
	} else {
		_, err = s.KV.Put(ctx, key, val)
	}
	return err
}

// Remove purges key from the bucket's stream: no delete marker stays.
func (s *KVStore) Remove(ctx context.Context, key string) error {
	_, err := eventbus.PurgeSubject(ctx, s.JS, events.KVStream(s.KV.Bucket()), s.subject(key))
	return err
}

// Keys lists the keys matching a KV subject filter ("wf.*"); none is an
// empty list, not an error.
func (s *KVStore) Keys(ctx context.Context, filter string) ([]string, error) {
	l, err := s.KV.ListKeysFiltered(ctx, filter)
	if errors.Is(err, jetstream.ErrNoKeysFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []string
	for k := range l.Keys() {
		out = append(out, k)
	}
	return out, nil
}

// Values reads every document whose key matches a KV subject filter
// ("wf.<id>.>"), in one pass: a watch that delivers the current value of
// every key, deleted ones left out, then ends.
func (s *KVStore) Values(ctx context.Context, filter string) (map[string][]byte, error) {
	w, err := s.KV.Watch(ctx, filter, jetstream.IgnoreDeletes())
	if err != nil {
		return nil, err
	}
	defer func() { _ = w.Stop() }()
	out := map[string][]byte{}
	for {
		var e jetstream.KeyValueEntry
		select {
		case e = <-w.Updates():
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if e == nil {
			return out, nil // every current value has been delivered
		}
		out[e.Key()] = e.Value()
	}
}
