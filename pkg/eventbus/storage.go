package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// JetStream refuses a write it has no room for with an API error
// (insufficient resources or storage), and one its disk refused (full: "no
// space left on device") with no answer at all: the publish times out
// while the connection is up and other requests are answered, and a
// single server keeps refusing that stream's writes until the stream is
// loaded again (pkg/natsembed does it for the embedded server). A service
// names both here, per stream or bucket: Storage logs an episode once
// when it starts and once when it ends, and reports it in the service's
// status.

// JetStream error codes that mean there is no room to store.
const (
	codeAccountResourcesExceeded = 10002 // "resource limits exceeded for account"
	codeInsufficientResources    = 10023 // "insufficient resources"
	codeMemoryResourcesExceeded  = 10028 // "insufficient memory resources available"
	codeStorageResourcesExceeded = 10047 // "insufficient storage resources available"
	codeStreamStoreFailed        = 10077 // "{err}": the store refused the message
)

// NoAnswerAfter is how long a write must have waited before a timeout
// counts as storage trouble: a shorter wait was the caller's own bound.
const NoAnswerAfter = time.Second

// StorageCauseNoAnswer is the cause of a write JetStream did not answer
// while the connection was up.
const StorageCauseNoAnswer = "no answer while connected (JetStream does not answer a write it cannot store, as when its disk is full)"

// StorageCause says whether err, the result of a JetStream write, means
// JetStream cannot store: the cause in a few words, and true. A timeout
// counts only when the connection was up (connected) and the write had
// waited at least NoAnswerAfter.
func StorageCause(err error, connected bool, waited time.Duration) (string, bool) {
	if err == nil || errors.Is(err, context.Canceled) {
		return "", false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		if cause, ok := apiStorageCause(api); ok {
			return cause, true
		}
	}
	if strings.Contains(err.Error(), "no space left on device") {
		return "no space left on device", true
	}
	if connected && waited >= NoAnswerAfter && isTimeout(err) {
		return StorageCauseNoAnswer, true
	}
	return "", false
}

func apiStorageCause(api *jetstream.APIError) (string, bool) {
	desc := strings.ToLower(api.Description)
	switch {
	case strings.Contains(desc, "no space left on device"):
		return "no space left on device", true
	case api.ErrorCode == codeStorageResourcesExceeded:
		return "insufficient storage", true
	case api.ErrorCode == codeInsufficientResources:
		return "insufficient resources", true
	case api.ErrorCode == codeMemoryResourcesExceeded:
		return "insufficient memory", true
	case api.ErrorCode == codeAccountResourcesExceeded:
		return "the account's storage limit is reached", true
	case api.ErrorCode == codeStreamStoreFailed && !strings.Contains(desc, "message size") && !strings.Contains(desc, "too large"):
		return "the store refused it: " + api.Description, true
	}
	return "", false
}

func isTimeout(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, nats.ErrTimeout) || errors.Is(err, jetstream.ErrAsyncPublishTimeout)
}

// StorageError is a write JetStream could not store: on which stream or
// bucket, and why.
type StorageError struct {
	Stream string // a stream (GANTRY_EVENTS) or a bucket (gantry_slots)
	Cause  string
	Err    error
}

func (e *StorageError) Error() string {
	return fmt.Sprintf("JetStream cannot store on %s: %s (%v)", e.Stream, e.Cause, e.Err)
}

func (e *StorageError) Unwrap() error { return e.Err }

// IsStorage says whether err is, or wraps, a StorageError.
func IsStorage(err error) bool {
	var se *StorageError
	return errors.As(err, &se)
}

// StorageMetrics counts what a Storage sees (pkg/consume has the
// Prometheus one).
type StorageMetrics interface {
	Failed(stream, cause string)
	Troubled(stream string, troubled bool)
}

// StorageForget is how long a problem stays reported with no write on its
// stream tried since: the services try failed work again, so a stream
// still broken keeps failing; one nobody writes to is not known broken.
var StorageForget = time.Minute

// Storage follows whether JetStream stores one service's writes, per
// stream or bucket. A nil *Storage observes nothing.
type Storage struct {
	Log *slog.Logger
	// Connected says whether the connection is up: a timeout counts as
	// storage trouble only then. Nil: taken as up.
	Connected func() bool
	Metrics   StorageMetrics
	// Now is the clock (tests set it).
	Now func() time.Time

	mu       sync.Mutex
	problems map[string]*storageEpisode
}

type storageEpisode struct {
	events.StorageProblem
	last time.Time
}

func (s *Storage) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

func (s *Storage) log() *slog.Logger {
	if s.Log == nil {
		return slog.Default()
	}
	return s.Log
}

// Observe notes the result of a write to stream that started at start:
// a success ends the stream's episode, a failure for reasons of storage
// starts or continues one and comes back as a *StorageError (wrapping
// err); any other error is returned as it is.
func (s *Storage) Observe(stream string, start time.Time, err error) error {
	if s == nil {
		return err
	}
	if err == nil {
		s.stored(stream)
		return nil
	}
	if IsStorage(err) {
		return err
	}
	connected := s.Connected == nil || s.Connected()
	cause, ok := StorageCause(err, connected, s.now().Sub(start))
	if !ok {
		return err
	}
	s.failed(stream, cause, err)
	return &StorageError{Stream: stream, Cause: cause, Err: err}
}

func (s *Storage) failed(stream, cause string, err error) {
	now := s.now()
	s.mu.Lock()
	if s.problems == nil {
		s.problems = map[string]*storageEpisode{}
	}
	p, ongoing := s.problems[stream]
	if !ongoing {
		p = &storageEpisode{StorageProblem: events.StorageProblem{Stream: stream, Cause: cause, Since: now}}
		s.problems[stream] = p
	}
	p.Cause, p.Failures, p.LastError, p.last = cause, p.Failures+1, err.Error(), now
	s.mu.Unlock()
	if s.Metrics != nil {
		s.Metrics.Failed(stream, cause)
	}
	if !ongoing {
		if s.Metrics != nil {
			s.Metrics.Troubled(stream, true)
		}
		s.log().Error("JetStream cannot store on "+stream+": "+cause, "stream", stream, "cause", cause, "err", err)
	}
}

func (s *Storage) stored(stream string) {
	s.mu.Lock()
	p, ok := s.problems[stream]
	if ok {
		delete(s.problems, stream)
	}
	s.mu.Unlock()
	if !ok {
		return
	}
	s.ended(p, "JetStream stores on "+stream+" again")
}

func (s *Storage) ended(p *storageEpisode, msg string) {
	if s.Metrics != nil {
		s.Metrics.Troubled(p.Stream, false)
	}
	s.log().Warn(msg, "stream", p.Stream, "cause", p.Cause, "after", s.now().Sub(p.Since).Round(time.Second).String(), "failures", p.Failures)
}

// Status is the streams and buckets the service cannot store on now, by
// name. A problem with no write tried for StorageForget is dropped (and
// logged).
func (s *Storage) Status() events.StorageStatus {
	if s == nil {
		return events.StorageStatus{OK: true}
	}
	now := s.now()
	s.mu.Lock()
	var out []events.StorageProblem
	var forgotten []*storageEpisode
	for name, p := range s.problems {
		if now.Sub(p.last) >= StorageForget {
			delete(s.problems, name)
			forgotten = append(forgotten, p)
			continue
		}
		out = append(out, p.StorageProblem)
	}
	s.mu.Unlock()
	for _, p := range forgotten {
		s.ended(p, "no write to "+p.Stream+" tried for "+StorageForget.String()+": no longer reported as failing")
	}
	slices.SortFunc(out, func(a, b events.StorageProblem) int { return strings.Compare(a.Stream, b.Stream) })
	return events.StorageStatus{OK: len(out) == 0, Problems: out}
}

// ObserveJS returns js with its publishes, and the writes of every bucket
// it opens, observed by st.
func ObserveJS(js jetstream.JetStream, st *Storage) jetstream.JetStream {
	if st == nil {
		return js
	}
	return observedJS{JetStream: js, st: st}
}

type observedJS struct {
	jetstream.JetStream
	st *Storage
}

func (o observedJS) Publish(ctx context.Context, subject string, payload []byte, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	start := time.Now()
	ack, err := o.JetStream.Publish(ctx, subject, payload, opts...)
	return ack, o.st.Observe(events.StreamOf(subject), start, err)
}

func (o observedJS) PublishMsg(ctx context.Context, msg *nats.Msg, opts ...jetstream.PublishOpt) (*jetstream.PubAck, error) {
	start := time.Now()
	ack, err := o.JetStream.PublishMsg(ctx, msg, opts...)
	return ack, o.st.Observe(events.StreamOf(msg.Subject), start, err)
}

func (o observedJS) KeyValue(ctx context.Context, bucket string) (jetstream.KeyValue, error) {
	kv, err := o.JetStream.KeyValue(ctx, bucket)
	return o.wrap(kv), err
}

func (o observedJS) CreateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := o.JetStream.CreateKeyValue(ctx, cfg)
	return o.wrap(kv), err
}

func (o observedJS) UpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := o.JetStream.UpdateKeyValue(ctx, cfg)
	return o.wrap(kv), err
}

func (o observedJS) CreateOrUpdateKeyValue(ctx context.Context, cfg jetstream.KeyValueConfig) (jetstream.KeyValue, error) {
	kv, err := o.JetStream.CreateOrUpdateKeyValue(ctx, cfg)
	return o.wrap(kv), err
}

func (o observedJS) wrap(kv jetstream.KeyValue) jetstream.KeyValue {
	if kv == nil {
		return nil
	}
	return ObserveKV(kv, o.st)
}

// ObserveKV returns kv with its writes observed by st.
func ObserveKV(kv jetstream.KeyValue, st *Storage) jetstream.KeyValue {
	if st == nil {
		return kv
	}
	return observedKV{KeyValue: kv, st: st}
}

type observedKV struct {
	jetstream.KeyValue
	st *Storage
}

func (o observedKV) Put(ctx context.Context, key string, value []byte) (uint64, error) {
	start := time.Now()
	rev, err := o.KeyValue.Put(ctx, key, value)
	return rev, o.st.Observe(o.Bucket(), start, err)
}

func (o observedKV) PutString(ctx context.Context, key string, value string) (uint64, error) {
	return o.Put(ctx, key, []byte(value))
}

func (o observedKV) Create(ctx context.Context, key string, value []byte, opts ...jetstream.KVCreateOpt) (uint64, error) {
	start := time.Now()
	rev, err := o.KeyValue.Create(ctx, key, value, opts...)
	return rev, o.st.Observe(o.Bucket(), start, err)
}

func (o observedKV) Update(ctx context.Context, key string, value []byte, revision uint64) (uint64, error) {
	start := time.Now()
	rev, err := o.KeyValue.Update(ctx, key, value, revision)
	return rev, o.st.Observe(o.Bucket(), start, err)
}

func (o observedKV) Delete(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	start := time.Now()
	return o.st.Observe(o.Bucket(), start, o.KeyValue.Delete(ctx, key, opts...))
}

func (o observedKV) Purge(ctx context.Context, key string, opts ...jetstream.KVDeleteOpt) error {
	start := time.Now()
	return o.st.Observe(o.Bucket(), start, o.KeyValue.Purge(ctx, key, opts...))
}

type stoppingKey struct{}

// WithStopping returns ctx carrying stopping, closed when the service is
// asked to stop. Work that drains (a handler finishing what it started)
// runs on a context that is not cancelled then; it uses Stopping to give
// up the waits that cannot end well soon, as another try of a write
// JetStream cannot store.
func WithStopping(ctx context.Context, stopping <-chan struct{}) context.Context {
	return context.WithValue(ctx, stoppingKey{}, stopping)
}

// Stopping says whether the service that runs ctx's work is stopping
// (WithStopping).
func Stopping(ctx context.Context) bool {
	ch, _ := ctx.Value(stoppingKey{}).(<-chan struct{})
	if ch == nil {
		return false
	}
	select {
	case <-ch:
		return true
	default:
		return false
	}
}
