// Package lag measures how far the state-store's projection is behind the
// event stream: its status in `nats micro stats`, and the metric
// gantry_projection_lag_events.
package lag

import (
	"context"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var projectionLag = promauto.NewGauge(prometheus.GaugeOpts{
	Name: "gantry_projection_lag_events",
	Help: "Events stored in GANTRY_EVENTS that the state-store has not projected yet (stream last sequence minus the projection's).",
})

// Interval is how often Watch measures.
const Interval = 5 * time.Second

// Meter measures the lag.
type Meter struct {
	Instance string
	// LastSeq is the event stream's last sequence.
	LastSeq func(ctx context.Context) (uint64, error)
	// Applied is the sequence up to which the projection is written.
	Applied func() uint64
}

// Status measures now (within 2 s).
func (m *Meter) Status(ctx context.Context) events.StateStoreStatus {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st := events.StateStoreStatus{Instance: m.Instance, AppliedSeq: m.Applied()}
	last, err := m.LastSeq(ctx)
	if err != nil {
		st.Error = "read the event stream: " + err.Error()
		return st
	}
	st.StreamLastSeq = last
	if last > st.AppliedSeq {
		st.ProjectionLag = last - st.AppliedSeq
	}
	return st
}

// Watch sets gantry_projection_lag_events every Interval until ctx ends.
func (m *Meter) Watch(ctx context.Context) {
	t := time.NewTicker(Interval)
	defer t.Stop()
	for {
		if st := m.Status(ctx); st.Error == "" {
			projectionLag.Set(float64(st.ProjectionLag))
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
