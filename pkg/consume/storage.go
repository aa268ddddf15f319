package consume

import (
	"context"
	"log/slog"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// What a service sees of JetStream storage (eventbus.Storage), as metrics.
var (
	storageFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "gantry_storage_write_failures_total",
		Help: "JetStream writes that failed for reasons of storage (no room, or no answer while connected), by stream or bucket.",
	}, []string{"stream"})
	storageTrouble = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "gantry_storage_trouble",
		Help: "Services in this process whose writes to the stream or bucket fail for reasons of storage now (0: it stores them).",
	}, []string{"stream"})
)

// StorageMetrics is the Prometheus side of an eventbus.Storage.
type StorageMetrics struct{}

// Failed counts a write that failed for reasons of storage.
func (StorageMetrics) Failed(stream, _ string) { storageFailures.WithLabelValues(stream).Inc() }

// Troubled counts the services in trouble on stream.
func (StorageMetrics) Troubled(stream string, troubled bool) {
	if troubled {
		storageTrouble.WithLabelValues(stream).Inc()
	} else {
		storageTrouble.WithLabelValues(stream).Dec()
	}
}

// NewStorage is a service's eventbus.Storage: timeouts count while nc is
// connected, episodes go to log and to the metrics.
func NewStorage(nc *nats.Conn, log *slog.Logger) *eventbus.Storage {
	return &eventbus.Storage{Log: log, Metrics: StorageMetrics{},
		Connected: func() bool { return nc.Status() == nats.CONNECTED }}
}

// StorageRetry is the first wait before a message whose handling failed
// for reasons of storage is handled again in place; it doubles up to
// StorageRetryMax.
var (
	StorageRetry    = time.Second
	StorageRetryMax = 10 * time.Second
)

// storageWait waits before handling again what failed for reasons of
// storage; false when the consumer is stopping first.
func storageWait(o Options, delay time.Duration) bool {
	select {
	case <-o.stopping:
		return false
	case <-time.After(delay):
		return true
	}
}

// untilStored runs f until its error is not storage trouble, or the
// consumer stops. A message whose handling cannot store what it wrote is
// kept and handled again here, not given back: its redeliveries are
// bounded (MaxDeliver), and a full disk must not use them up.
func untilStored(ctx context.Context, o Options, log msgLogger, f func() error) error {
	err := f()
	delay := StorageRetry
	for tries := 1; eventbus.IsStorage(err) && !o.draining(); tries++ {
		if tries == 1 {
			log.get().Warn("JetStream cannot store what handling this message wrote; handling it again here until it can (its deliveries are not used up)", "err", err)
		}
		if !storageWait(o, delay) || ctx.Err() != nil {
			break
		}
		delay = min(2*delay, StorageRetryMax)
		err = f()
		if err == nil {
			log.get().Info("handled once JetStream stored again", "tries", tries+1)
		}
	}
	return err
}
