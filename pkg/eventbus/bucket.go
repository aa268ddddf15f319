package eventbus

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Bucket keeps JSON records of one type in a JetStream KV bucket, with
// compare-and-set writes. It is the JetStream adapter behind the services'
// record ports.
type Bucket[T any] struct {
	KV jetstream.KeyValue
	// JS is the JetStream handle behind KV (NewBucket sets it): Remove
	// purges the bucket's stream through it.
	JS jetstream.JetStream
}

// NewBucket opens the records of type T in the named bucket.
func NewBucket[T any](ctx context.Context, js jetstream.JetStream, name string) (Bucket[T], error) {
	kv, err := js.KeyValue(ctx, name)
	if err != nil {
		return Bucket[T]{}, fmt.Errorf("bucket %s: %w", name, err)
	}
	return Bucket[T]{KV: kv, JS: js}, nil
}

// whenConnected runs a request of the bucket's (see whenConnected).
func (b Bucket[T]) whenConnected(ctx context.Context, op func() error) error {
	var nc *nats.Conn
	if b.JS != nil {
		nc = b.JS.Conn()
	}
	return whenConnected(ctx, nc, op)
}

// Get returns the record at key and its revision; events.ErrNoRecord when there
// is none, events.ErrBadRecord (with the revision, to write over it) when it does
// not decode.
func (b Bucket[T]) Get(ctx context.Context, key string) (T, uint64, error) {
	var v T
	var e jetstream.KeyValueEntry
	err := b.whenConnected(ctx, func() (err error) { e, err = b.KV.Get(ctx, key); return err })
	if errors.Is(err, jetstream.ErrKeyNotFound) {
		return v, 0, fmt.Errorf("%s/%s: %w", b.KV.Bucket(), key, events.ErrNoRecord)
	}
	if err != nil {
		return v, 0, fmt.Errorf("read %s/%s: %w", b.KV.Bucket(), key, err)
	}
	if err := DecodeRecord(e.Value(), &v); err != nil {
		return v, e.Revision(), fmt.Errorf("%w: %s/%s: %w", events.ErrBadRecord, b.KV.Bucket(), key, err)
	}
	return v, e.Revision(), nil
}

// Absent asks the bucket stream's leader whether key holds no record.
// Get reads any replica (a direct get), and a replica that is behind (cut
// off in a partition, say) answers "no record" for a key written since:
// Absent is the answer to act on before treating a record as gone.
func (b Bucket[T]) Absent(ctx context.Context, key string) (bool, error) {
	var seq uint64
	var h nats.Header
	err := b.whenConnected(ctx, func() (err error) {
		seq, h, err = leaderMsgGet(ctx, b.JS.Conn(), events.KVStream(b.KV.Bucket()), msgGetRequest{LastFor: "$KV." + b.KV.Bucket() + "." + key})
		return err
	})
	if err != nil {
		return false, fmt.Errorf("ask the leader of %s for %s: %w", b.KV.Bucket(), key, err)
	}
	op := h.Get("KV-Operation")
	return seq == 0 || op == "DEL" || op == "PURGE", nil
}

// Put writes v at key: a create when rev is 0, else a compare-and-set on
// rev (events.ErrChanged when either finds something else). It returns the new
// revision.
func (b Bucket[T]) Put(ctx context.Context, key string, v T, rev uint64) (uint64, error) {
	data, err := EncodeRecord(v)
	if err != nil {
		return 0, fmt.Errorf("encode %s/%s: %w", b.KV.Bucket(), key, err)
	}
	var n uint64
	err = b.whenConnected(ctx, func() (err error) {
		if rev == 0 {
			n, err = b.KV.Create(ctx, key, data)
		} else {
			n, err = b.KV.Update(ctx, key, data, rev)
		}
		return err
	})
	if IsConflict(err) {
		return 0, fmt.Errorf("write %s/%s at revision %d: %w", b.KV.Bucket(), key, rev, events.ErrChanged)
	}
	if err != nil {
		return 0, fmt.Errorf("write %s/%s: %w", b.KV.Bucket(), key, err)
	}
	return n, nil
}

// Update is events.UpdateRecord on the bucket.
func (b Bucket[T]) Update(ctx context.Context, key string, change func(*T) error) (uint64, error) {
	return events.UpdateRecord[T](ctx, b, key, change)
}

// Revision is the bucket's last revision: every record written so far
// has a revision at or below it, every record written later one above
// (revisions are the sequences of the bucket's stream; a bucket made
// again starts from 1).
func (b Bucket[T]) Revision(ctx context.Context) (uint64, error) {
	var st jetstream.KeyValueStatus
	err := b.whenConnected(ctx, func() (err error) { st, err = b.KV.Status(ctx); return err })
	if err != nil {
		return 0, fmt.Errorf("read the revision of %s: %w", b.KV.Bucket(), err)
	}
	s, ok := st.(*jetstream.KeyValueBucketStatus)
	if !ok || s.StreamInfo() == nil {
		return 0, fmt.Errorf("read the revision of %s: no stream state", b.KV.Bucket())
	}
	return s.StreamInfo().State.LastSeq, nil
}

// Keys lists the keys matching filter (a KV subject filter: "host.h1.>";
// "" for every key). No keys is an empty list, not an error.
func (b Bucket[T]) Keys(ctx context.Context, filter string) ([]string, error) {
	if filter == "" {
		filter = ">"
	}
	var l jetstream.KeyLister
	err := b.whenConnected(ctx, func() (err error) { l, err = b.KV.ListKeysFiltered(ctx, filter); return err })
	if err != nil {
		return nil, fmt.Errorf("list %s %s: %w", b.KV.Bucket(), filter, err)
	}
	var keys []string
	for k := range l.Keys() {
		keys = append(keys, k)
	}
	return keys, nil
}

// Entries reads every record whose key matches filter (a KV subject
// filter: "<workflow id>.>"), in one pass over the bucket: a watch that
// delivers the current values and ends, not a listing then a read per key.
// Deleted keys are left out. A record that does not decode does not fail
// the read: it is left out of the records and returned in bad, by key, as
// an events.ErrBadRecord, for the caller to decide without it (one damaged record
// must not make every read of its neighbours fail).
func (b Bucket[T]) Entries(ctx context.Context, filter string) (recs map[string]T, bad map[string]error, err error) {
	var w jetstream.KeyWatcher
	err = b.whenConnected(ctx, func() (err error) {
		w, err = b.KV.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
		return err
	})
	if err != nil {
		return nil, nil, fmt.Errorf("read %s %s: %w", b.KV.Bucket(), filter, err)
	}
	defer w.Stop()
	recs = map[string]T{}
	for {
		select {
		case <-ctx.Done():
			return nil, nil, fmt.Errorf("read %s %s: %w", b.KV.Bucket(), filter, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return nil, nil, fmt.Errorf("read %s %s: watch ended early", b.KV.Bucket(), filter)
			}
			if e == nil { // every current value has been delivered
				return recs, bad, nil
			}
			var v T
			if err := DecodeRecord(e.Value(), &v); err != nil {
				if bad == nil {
					bad = map[string]error{}
				}
				bad[e.Key()] = fmt.Errorf("%w: %s/%s: %w", events.ErrBadRecord, b.KV.Bucket(), e.Key(), err)
				continue
			}
			recs[e.Key()] = v
		}
	}
}

// Remove deletes every record whose key matches filter (a KV subject
// filter: "<id>", "<id>.>"), with its history and without leaving a
// delete marker: a purge of the bucket's stream by subject, which takes
// $JS.API.STREAM.PURGE.KV_<bucket>. It returns how many messages went.
// Removing what is not there is not an error.
func (b Bucket[T]) Remove(ctx context.Context, filter string) (uint64, error) {
	if b.JS == nil {
		return 0, fmt.Errorf("remove %s %s: no JetStream handle", b.KV.Bucket(), filter)
	}
	n, err := PurgeSubject(ctx, b.JS, events.KVStream(b.KV.Bucket()), "$KV."+b.KV.Bucket()+"."+filter)
	if err != nil {
		return 0, fmt.Errorf("remove %s %s: %w", b.KV.Bucket(), filter, err)
	}
	return n, nil
}

// Size counts the records whose key matches filter and their bytes as
// stored (key, value and a message's overhead), reading them once.
func (b Bucket[T]) Size(ctx context.Context, filter string) (events.StoreSize, error) {
	var sz events.StoreSize
	w, err := b.KV.WatchFiltered(ctx, []string{filter}, jetstream.IgnoreDeletes())
	if err != nil {
		return sz, fmt.Errorf("read %s %s: %w", b.KV.Bucket(), filter, err)
	}
	defer w.Stop()
	for {
		select {
		case <-ctx.Done():
			return sz, fmt.Errorf("read %s %s: %w", b.KV.Bucket(), filter, ctx.Err())
		case e, ok := <-w.Updates():
			if !ok {
				return sz, fmt.Errorf("read %s %s: watch ended early", b.KV.Bucket(), filter)
			}
			if e == nil {
				return sz, nil
			}
			sz.Messages++
			sz.Bytes += uint64(KVRecordSize(b.KV.Bucket(), e.Key(), len(e.Value())))
		}
	}
}

// KVRecordSize is about what a KV record counts for in its stream's
// bytes: subject, value, the expected-revision header a compare-and-set
// write carries, and the store's own per-message bytes (measured: within
// a few bytes for gantry's records).
func KVRecordSize(bucket, key string, value int) int {
	return len("$KV.") + len(bucket) + 1 + len(key) + value + 88
}

// PurgeSubject removes every message of stream on subject (wildcards
// allowed), and returns how many went.
func PurgeSubject(ctx context.Context, js jetstream.JetStream, stream, subject string) (uint64, error) {
	req, _ := json.Marshal(map[string]string{"filter": subject})
	msg, err := js.Conn().RequestWithContext(ctx, "$JS.API.STREAM.PURGE."+stream, req)
	if err != nil {
		return 0, fmt.Errorf("purge %s %s: %w", stream, subject, err)
	}
	var resp struct {
		Success bool   `json:"success"`
		Purged  uint64 `json:"purged"`
		Error   *struct {
			Code        int    `json:"code"`
			ErrCode     int    `json:"err_code"`
			Description string `json:"description"`
		} `json:"error"`
	}
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, fmt.Errorf("purge %s %s: bad reply %q: %w", stream, subject, msg.Data, err)
	}
	if resp.Error != nil {
		if resp.Error.ErrCode == int(jetstream.JSErrCodeStreamNotFound) {
			return 0, fmt.Errorf("purge %s %s: %w", stream, subject, jetstream.ErrStreamNotFound)
		}
		return 0, fmt.Errorf("purge %s %s: %s (%d)", stream, subject, resp.Error.Description, resp.Error.ErrCode)
	}
	return resp.Purged, nil
}

// EncodeRecord is how a record is stored: JSON, compressed when large
// (Pack), or an ErrTooLarge error.
func EncodeRecord(v any) ([]byte, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	data, _, err = Pack(data)
	return data, err
}

// DecodeRecord reads a record as EncodeRecord stored it.
func DecodeRecord(data []byte, v any) error {
	data, err := Unpack(data)
	if err != nil {
		return err
	}
	return json.Unmarshal(data, v)
}

// IsConflict says whether a KV write failed a compare-and-set: a create
// found the key, an update found another revision. A single nats-server
// reports both as "wrong last sequence" (10071, which jetstream.ErrKeyExists
// matches); a replicated (R3) bucket reports 10164, which the client maps
// to ErrKeyExists on a plain create, to ErrKeyRevisionMismatch on an
// update, and not at all on a create over a deleted key's marker that
// another writer won. Taken for a failed write, such a conflict failed
// nodes on a NATS cluster (a slot not taken, a record not re-read).
func IsConflict(err error) bool {
	if errors.Is(err, jetstream.ErrKeyExists) || errors.Is(err, jetstream.ErrKeyRevisionMismatch) {
		return true
	}
	var api *jetstream.APIError
	return errors.As(err, &api) && (api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequence || api.ErrorCode == jetstream.JSErrCodeStreamWrongLastSequenceConstant)
}

// KeyMatches says whether a KV key matches a subject filter: "*" is one
// token, a final ">" one or more.
func KeyMatches(filter, key string) bool {
	ft, kt := strings.Split(filter, "."), strings.Split(key, ".")
	for i, f := range ft {
		if f == ">" {
			return i == len(ft)-1 && len(kt) > i
		}
		if i >= len(kt) || (f != "*" && f != kt[i]) {
			return false
		}
	}
	return len(ft) == len(kt)
}
