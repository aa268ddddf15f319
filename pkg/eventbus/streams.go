package eventbus

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/cenkalti/backoff/v4"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// Every stream, consumer and bucket setting lives here; their names and
// subjects are in pkg/events.

// Retention and delivery settings.
const (
	EventsMaxAge = 30 * 24 * time.Hour
	LogsMaxAge   = 24 * time.Hour
	LogsMaxBytes = 1 << 30
	// LogsConsumerIdle is how long a consumer on the log stream may be
	// idle before the server deletes it: people create them to read it
	// (gantry logs, the web view), and one they leave behind goes.
	LogsConsumerIdle = time.Hour
	DuplicateWindow  = 2 * time.Minute  // Nats-Msg-Id dedupe
	WorkAckWait      = 10 * time.Second // InProgress every third of it keeps long work alive
	EventAckWait     = 10 * time.Second
	MaxDeliverEvents = 20 // then the message is given up and logged as poison
	MaxDeliverWork   = 50
	MaxMessageBytes  = 1 << 20
	// MaxRequestBytes is the largest message the NATS servers gantry
	// configures take (max_payload): room for a request carrying a
	// composition well over the planner's limit (dag.DefaultMaxBytes), so
	// one too large gets the planner's answer naming both sizes, not the
	// client's "maximum payload exceeded".
	MaxRequestBytes   = 8 << 20
	ExecutorMaxAcks   = 256
	HealthGateMaxAcks = 64
	PlannerMaxAcks    = 256
	// PlannerPrefetch is how many events the planner pulls at a time, and
	// the largest batch it applies before one flush (most are node events,
	// which it acknowledges unread: engine.Ignores).
	PlannerPrefetch = 128
	// StateStorePrefetch is how many events the state-store takes in at a
	// time: the largest batch it applies before one write per document.
	StateStorePrefetch = 512
	// StateStoreLinger is how long the state-store waits to fill a batch:
	// a node's running and succeeded events, a few milliseconds apart,
	// then make one write of its documents instead of two. No run waits
	// for the projection.
	StateStoreLinger = 25 * time.Millisecond
	// StreamWatchInterval is how often the state-store checks that the
	// event stream it follows is still the one it started on.
	StreamWatchInterval = 2 * time.Second
	// HealInterval is how often each service checks that its streams,
	// consumers and buckets are there, for the ones nothing it does would
	// find missing (a stream it only fires output lines into).
	HealInterval = 5 * time.Second
	// HealDelay is how long a service waits between finding a part
	// missing and re-creating it.
	HealDelay = 500 * time.Millisecond
)

// Streams returns every stream's configuration. replicas is 1 for a single
// server (gantry dev, tests) and 3 for a production cluster.
func Streams(replicas int) []jetstream.StreamConfig {
	if replicas < 1 {
		replicas = 1
	}
	return []jetstream.StreamConfig{
		{
			Name:        events.StreamEvents,
			Description: "gantry lifecycle and health events",
			Subjects:    events.StreamSubjects(events.StreamEvents),
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      EventsMaxAge,
			MaxMsgSize:  MaxMessageBytes,
			Duplicates:  DuplicateWindow,
			Replicas:    replicas,
		},
		{
			Name:        events.StreamDispatch,
			Description: "gantry formula-ready work for executors",
			Subjects:    events.StreamSubjects(events.StreamDispatch),
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			MaxMsgSize:  MaxMessageBytes,
			Duplicates:  DuplicateWindow,
			Replicas:    replicas,
		},
		{
			Name:        events.StreamGates,
			Description: "gantry health-gate work",
			Subjects:    events.StreamSubjects(events.StreamGates),
			Retention:   jetstream.WorkQueuePolicy,
			Storage:     jetstream.FileStorage,
			MaxMsgSize:  MaxMessageBytes,
			Duplicates:  DuplicateWindow,
			Replicas:    replicas,
		},
		{
			Name:        events.StreamLogs,
			Description: "gantry node output lines",
			Subjects:    events.StreamSubjects(events.StreamLogs),
			Retention:   jetstream.LimitsPolicy,
			Storage:     jetstream.FileStorage,
			MaxAge:      LogsMaxAge,
			MaxBytes:    LogsMaxBytes,
			MaxMsgSize:  64 << 10,
			Discard:     jetstream.DiscardOld,
			Replicas:    replicas,
			// No service pulls from it by name: every consumer is a
			// reader's, and goes once idle.
			ConsumerLimits: jetstream.StreamConsumerLimits{InactiveThreshold: LogsConsumerIdle},
		},
	}
}

// Consumers maps each stream to its durable consumers.
func Consumers() map[string][]jetstream.ConsumerConfig {
	return map[string][]jetstream.ConsumerConfig{
		events.StreamEvents: {
			{
				Durable:        events.ConsumerPlanner,
				Description:    "planner: steps runs on formula and health events (node events acknowledged unread)",
				FilterSubjects: []string{events.AllHostLifecycle, events.AllHealth},
				AckPolicy:      jetstream.AckExplicitPolicy,
				AckWait:        EventAckWait,
				MaxDeliver:     MaxDeliverEvents,
				DeliverPolicy:  jetstream.DeliverAllPolicy,
				// Not strictly ordered: the planner applies a transition only
				// if it moves a formula forward in the current generation,
				// so a late redelivery changes nothing.
				MaxAckPending: PlannerMaxAcks,
			},
		},
		// Executors of a zone have a durable of their own (ExecutorConsumer).
		events.StreamDispatch: {ExecutorConsumer("")},
		events.StreamGates: {{
			Durable:       events.ConsumerHealthGate,
			Description:   "health-gate workers: run gate checks",
			AckPolicy:     jetstream.AckExplicitPolicy,
			AckWait:       WorkAckWait,
			MaxDeliver:    MaxDeliverWork,
			MaxAckPending: HealthGateMaxAcks,
		}},
	}
}

// KeyValues returns the KV bucket configurations.
func KeyValues(replicas int) []jetstream.KeyValueConfig {
	if replicas < 1 {
		replicas = 1
	}
	return []jetstream.KeyValueConfig{
		{Bucket: events.BucketWorkflows, Description: "gantry accepted workflows", History: 1, Storage: jetstream.FileStorage, Replicas: replicas, MaxValueSize: MaxMessageBytes},
		{Bucket: events.BucketState, Description: "gantry state projections", History: 1, Storage: jetstream.FileStorage, Replicas: replicas, MaxValueSize: MaxMessageBytes},
		{Bucket: events.BucketNodes, Description: "gantry node attempts and completions", History: 1, Storage: jetstream.FileStorage, Replicas: replicas, MaxValueSize: 64 << 10},
		{Bucket: events.BucketRuns, Description: "gantry run state snapshots", History: 1, Storage: jetstream.FileStorage, Replicas: replicas, MaxValueSize: MaxMessageBytes},
		{Bucket: events.BucketOutputs, Description: "gantry node outputs", History: 1, Storage: jetstream.FileStorage, Replicas: replicas, MaxValueSize: MaxMessageBytes},
		// Every write of a slot lives SlotTTL; an expired one leaves a
		// marker, so executors watching the bucket see the slot free.
		{Bucket: events.BucketSlots, Description: "gantry concurrency slots in use and nodes waiting for them", History: 1, TTL: events.SlotTTL, LimitMarkerTTL: events.SlotTTL,
			Storage: jetstream.FileStorage, Replicas: replicas, MaxValueSize: 4 << 10},
	}
}

// Open returns a JetStream handle on nc after Ensure: what every service
// does first. While the server cannot create them yet (a fresh cluster
// electing its leaders answers with timeouts, no responders or 5xx), it
// tries again with a growing delay (0.5 s up to 10 s), logging each try,
// for at most EnsureRetryFor; a refusal or a bad setting fails at once.
func Open(ctx context.Context, nc *nats.Conn, id events.Identity, replicas int, log *slog.Logger) (jetstream.JetStream, error) {
	js, err := jetstream.New(nc, jetstream.WithPublishAsyncTimeout(AsyncPublishTimeout))
	if err != nil {
		return nil, err
	}
	err = ensureWithRetry(ctx, func() error { return refused(nc, id, Ensure(ctx, js, id, replicas)) }, EnsureRetryFor, log)
	if err != nil {
		return nil, err
	}
	return js, nil
}

// AsyncPublishTimeout is how long an asynchronous publish of a handle from
// Open waits for its acknowledgement before it fails with
// jetstream.ErrAsyncPublishTimeout. JetStream does not answer a write it
// cannot store (its disk full): without a bound, such publishes would
// wait for ever, and once 4000 waited, every asynchronous publish of the
// process would be refused, long after the disk was freed.
var AsyncPublishTimeout = 2 * PublishTimeout

// EnsureRetryFor bounds how long Open tries to create a service's streams,
// consumers and buckets while the server cannot yet.
var EnsureRetryFor = 2 * time.Minute

// ensureWithRetry runs ensure until it succeeds, fails for good (not
// Transient), ctx ends, or retryFor has passed.
func ensureWithRetry(ctx context.Context, ensure func() error, retryFor time.Duration, log *slog.Logger) error {
	if log == nil {
		log = slog.Default()
	}
	bo := backoff.NewExponentialBackOff()
	bo.InitialInterval, bo.MaxInterval, bo.MaxElapsedTime = 500*time.Millisecond, 10*time.Second, retryFor
	bo.Reset()
	start := time.Now()
	for try := 1; ; try++ {
		err := ensure()
		if err == nil {
			if try > 1 {
				log.Info("streams and buckets ready", "tries", try, "waited", time.Since(start).Round(time.Millisecond).String())
			}
			return nil
		}
		if !Transient(err) || ctx.Err() != nil {
			return err
		}
		wait := bo.NextBackOff()
		if wait == backoff.Stop {
			return fmt.Errorf("streams and buckets not ready after %d tries in %s: %w", try, time.Since(start).Round(time.Second), err)
		}
		log.Warn("cannot create the streams and buckets yet; trying again", "err", err, "try", try, "retry_in", wait.Round(time.Millisecond).String())
		select {
		case <-ctx.Done():
			return err
		case <-time.After(wait):
		}
	}
}

// Transient says whether err may go away by itself: the JetStream API did
// not answer in time, had no responders, or answered with a server error
// (a cluster without a meta leader yet, a stream whose replicas are being
// placed), or was not sent while the connection is down (a service's
// connection keeps nothing to send then). A refusal (permissions) or a bad
// request is not.
func Transient(err error) bool {
	if err == nil || errors.Is(err, ErrRefused) {
		return false
	}
	var api *jetstream.APIError
	if errors.As(err, &api) {
		return api.Code >= 500
	}
	for _, t := range []error{context.DeadlineExceeded, nats.ErrTimeout, nats.ErrNoResponders, jetstream.ErrNoStreamResponse,
		jetstream.ErrJetStreamNotEnabled, nats.ErrJetStreamNotEnabled, nats.ErrConnectionReconnecting, nats.ErrReconnectBufExceeded} {
		if errors.Is(err, t) {
			return true
		}
	}
	return false
}

// ErrRefused wraps an error the NATS server's permissions caused.
var ErrRefused = errors.New("refused by the NATS server")

// refused names a permissions violation behind err: most likely the
// process is not connected as identity id.
func refused(nc *nats.Conn, id events.Identity, err error) error {
	if last := nc.LastError(); last != nil && errors.Is(last, nats.ErrPermissionViolation) {
		return fmt.Errorf("%w (%v): is this process connected as the %s identity (--nkey or --creds)? %w", ErrRefused, last, id, err)
	}
	return err
}

// Ensure creates or updates every stream, consumer and KV bucket the
// service id uses (events.Uses), and deletes its retired consumers. Each service
// calls it at start, so any one of them can come up first, and again when
// it finds a part missing.
func Ensure(ctx context.Context, js jetstream.JetStream, id events.Identity, replicas int) error {
	u := events.Uses(id)
	for _, cfg := range Streams(replicas) {
		if !slices.Contains(u.Streams, cfg.Name) {
			continue
		}
		if err := retryServerError(ctx, func() error { _, err := js.CreateOrUpdateStream(ctx, cfg); return err }); err != nil {
			return fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
	}
	for stream, cs := range Consumers() {
		for _, cfg := range cs {
			if !slices.Contains(u.Consumes, events.Durable{Stream: stream, Name: cfg.Durable}) {
				continue
			}
			if err := retryServerError(ctx, func() error { _, err := js.CreateOrUpdateConsumer(ctx, stream, cfg); return err }); err != nil {
				return fmt.Errorf("consumer %s on %s: %w", cfg.Durable, stream, err)
			}
		}
	}
	for _, d := range u.Retire {
		if err := js.DeleteConsumer(ctx, d.Stream, d.Name); err != nil && !errors.Is(err, jetstream.ErrConsumerNotFound) {
			return fmt.Errorf("retired consumer %s on %s: %w", d.Name, d.Stream, err)
		}
	}
	for _, cfg := range KeyValues(replicas) {
		if !slices.Contains(u.Read, cfg.Bucket) && !slices.Contains(u.Write, cfg.Bucket) {
			continue
		}
		if err := retryServerError(ctx, func() error { _, err := js.CreateOrUpdateKeyValue(ctx, cfg); return err }); err != nil {
			return fmt.Errorf("kv bucket %s: %w", cfg.Bucket, err)
		}
	}
	return nil
}

// retryServerError runs create until it succeeds, fails with anything but
// a server error, or has failed 6 times. Services that start together
// create some of the same streams and buckets; the server can refuse the
// one that loses the race with an internal error ("error creating store
// for stream") for a moment.
func retryServerError(ctx context.Context, create func() error) error {
	delay := 50 * time.Millisecond
	for try := 1; ; try++ {
		err := create()
		var api *jetstream.APIError
		if err == nil || try == 6 || !errors.As(err, &api) || api.Code < 500 {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(delay):
		}
		delay *= 2
	}
}

// IsMissing says whether err means a stream, consumer or bucket an
// operation needs is not there (deleted by someone with the rights to).
func IsMissing(err error) bool {
	for _, target := range []error{jetstream.ErrNoStreamResponse, jetstream.ErrStreamNotFound, jetstream.ErrConsumerNotFound,
		jetstream.ErrConsumerDeleted, jetstream.ErrBucketNotFound, nats.ErrNoResponders,
		// Some paths of the client (KV listings) still answer with the
		// older package's errors.
		nats.ErrStreamNotFound, nats.ErrConsumerNotFound, nats.ErrBucketNotFound} {
		if errors.Is(err, target) {
			return true
		}
	}
	return false
}

// Healer re-creates what of a service's topology has gone missing, and
// says so in its log. It is safe to call from many goroutines.
type Healer struct {
	JS       jetstream.JetStream
	ID       events.Identity
	Replicas int
	Log      *slog.Logger
	mu       sync.Mutex
}

// Heal finds which of the service's streams, durable consumers and
// buckets are missing, logs each, and re-creates them (Ensure).
func (h *Healer) Heal(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	gone, err := missing(ctx, h.JS, events.Uses(h.ID))
	if err != nil || len(gone) == 0 {
		return err
	}
	// A stream created again under the name of one the server is still
	// removing can come out unusable (its old sequence state and no
	// acknowledgements), so give the removal a moment and look again.
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(HealDelay):
	}
	if gone, err = missing(ctx, h.JS, events.Uses(h.ID)); err != nil || len(gone) == 0 {
		return err
	}
	if err := Ensure(ctx, h.JS, h.ID, h.Replicas); err != nil {
		return fmt.Errorf("re-create %v: %w", gone, err)
	}
	for _, g := range gone {
		h.logger().Warn("re-created a missing "+g.kind, g.kind, g.name)
	}
	return nil
}

func (h *Healer) logger() *slog.Logger {
	if h.Log == nil {
		return slog.Default()
	}
	return h.Log
}

// Watch heals every HealInterval until ctx ends.
func (h *Healer) Watch(ctx context.Context) {
	t := time.NewTicker(HealInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if err := h.Heal(ctx); err != nil && ctx.Err() == nil {
			h.logger().Error("cannot check or re-create the topology", "err", err)
		}
	}
}

type part struct{ kind, name string }

func missing(ctx context.Context, js jetstream.JetStream, u events.Usage) ([]part, error) {
	var gone []part
	check := func(p part, err error, notFound error) error {
		switch {
		case err == nil:
		case errors.Is(err, notFound) || errors.Is(err, jetstream.ErrStreamNotFound):
			gone = append(gone, p)
		default:
			return fmt.Errorf("%s %s: %w", p.kind, p.name, err)
		}
		return nil
	}
	for _, s := range u.Streams {
		_, err := js.Stream(ctx, s)
		if err := check(part{"stream", s}, err, jetstream.ErrStreamNotFound); err != nil {
			return nil, err
		}
	}
	for _, d := range u.Consumes {
		_, err := js.Consumer(ctx, d.Stream, d.Name)
		if err := check(part{"consumer", d.Stream + "/" + d.Name}, err, jetstream.ErrConsumerNotFound); err != nil {
			return nil, err
		}
	}
	for _, b := range append(slices.Clone(u.Read), u.Write...) {
		_, err := js.KeyValue(ctx, b)
		if err := check(part{"bucket", b}, err, jetstream.ErrBucketNotFound); err != nil {
			return nil, err
		}
	}
	return gone, nil
}

// Consumer returns an Options.Repair for the durable consumer name on
// stream: heal, then the consumer.
func (h *Healer) Consumer(stream, name string) func(ctx context.Context) (jetstream.Consumer, error) {
	return func(ctx context.Context) (jetstream.Consumer, error) {
		if err := h.Heal(ctx); err != nil {
			return nil, err
		}
		return h.JS.Consumer(ctx, stream, name)
	}
}
