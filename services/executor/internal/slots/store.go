package slots

import (
	"context"
	"strings"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// KV is the Store of a JetStream KV bucket (gantry_slots): its TTL is the
// bucket's, and an expired key leaves a marker watchers see as a delete.
// Its writes wait for NC while it is down (a service's connection keeps
// nothing to send then: eventbus.WhenConnected), within their context, or
// eventbus.PublishTimeout when it has no deadline: a slot given back during
// a disconnect is deleted once it is back, not left taken until it
// expires.
type KV struct {
	KV jetstream.KeyValue
	NC *nats.Conn
}

// whenConnected runs a write, again once NC is back (see KV).
func (s KV) whenConnected(ctx context.Context, op func(ctx context.Context) error) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, eventbus.PublishTimeout)
		defer cancel()
	}
	return eventbus.WhenConnected(ctx, s.NC, func() error { return op(ctx) })
}

func (s KV) Create(ctx context.Context, key string, val []byte) (rev uint64, err error) {
	err = s.whenConnected(ctx, func(ctx context.Context) error { rev, err = s.KV.Create(ctx, key, val); return err })
	if eventbus.IsConflict(err) {
		return 0, ErrExists // taken (on an R3 bucket, also the 10164 form)
	}
	return rev, err
}

func (s KV) Update(ctx context.Context, key string, val []byte, rev uint64) (n uint64, err error) {
	err = s.whenConnected(ctx, func(ctx context.Context) error { n, err = s.KV.Update(ctx, key, val, rev); return err })
	return n, err
}

func (s KV) Delete(ctx context.Context, key string, rev uint64) error {
	err := s.whenConnected(ctx, func(ctx context.Context) error { return s.KV.Delete(ctx, key, jetstream.LastRevision(rev)) })
	if err != nil && (eventbus.IsConflict(err) || strings.Contains(err.Error(), "wrong last sequence")) {
		return nil // no longer ours: expired and taken by another
	}
	return err
}

func (s KV) Watch(ctx context.Context) (<-chan Change, error) {
	w, err := s.KV.WatchAll(ctx)
	if err != nil {
		return nil, err
	}
	out := make(chan Change, 256)
	go func() {
		defer close(out)
		defer func() { _ = w.Stop() }()
		for {
			select {
			case <-ctx.Done():
				return
			case e, ok := <-w.Updates():
				if !ok {
					return
				}
				c := Change{}
				if e != nil {
					c = Change{Key: e.Key(), Rev: e.Revision(), Deleted: e.Operation() != jetstream.KeyValuePut}
				}
				select {
				case out <- c:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out, nil
}
