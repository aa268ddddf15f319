package project

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/eventbus"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// silentJS is a JetStream whose asynchronous publishes are never
// answered, as a stream that hit a write error (its disk full) answers
// none.
type silentJS struct{ jetstream.JetStream }

func (silentJS) PublishMsgAsync(m *nats.Msg, _ ...jetstream.PublishOpt) (jetstream.PubAckFuture, error) {
	return silentFuture{m}, nil
}

type silentFuture struct{ m *nats.Msg }

func (silentFuture) Ok() <-chan *jetstream.PubAck { return nil }
func (silentFuture) Err() <-chan error            { return nil }
func (f silentFuture) Msg() *nats.Msg             { return f.m }

type bucketNamed struct{ jetstream.KeyValue }

func (bucketNamed) Bucket() string { return events.BucketState }

// The projection's writes wait for their acknowledgements a bounded time,
// and a write JetStream does not answer fails naming storage: the
// projection tries again (and goes on once JetStream stores again)
// instead of waiting for ever.
func TestPutAllDoesNotWaitForEver(t *testing.T) {
	s := &KVStore{JS: silentJS{}, KV: bucketNamed{}, Storage: &eventbus.Storage{}}
	ws := []Write{{Key: "wf.a", Val: []byte("{}"), Rev: 3}, {Key: "wf.b", Val: []byte("{}"), Rev: 4}}
	done := make(chan struct{})
	start := time.Now()
	go func() { s.PutAll(context.Background(), ws); close(done) }()
	select {
	case <-done:
	case <-time.After(2 * eventbus.PublishTimeout):
		t.Fatalf("PutAll still waiting %s after writes nobody answers", 2*eventbus.PublishTimeout)
	}
	t.Logf("PutAll returned after %s", time.Since(start).Round(time.Millisecond))
	for _, w := range ws {
		if !eventbus.IsStorage(w.Err) {
			t.Errorf("write %s: %v, want an error naming storage", w.Key, w.Err)
		}
	}
	if st := s.Storage.Status(); st.OK || st.Problems[0].Stream != events.BucketState {
		t.Errorf("storage status %+v, want gantry_state failing", st)
	}
}
