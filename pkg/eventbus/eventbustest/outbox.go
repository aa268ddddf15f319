package eventbustest

import (
	"context"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"go.opentelemetry.io/otel/trace"
)

// MemoryOutbox is eventbus.Outbox in memory, for the services' use-case tests.
// Flush stores what was emitted, each message id once, as Outbox does.
type MemoryOutbox struct {
	mu      sync.Mutex
	pending []Emitted
	stored  []Emitted
	seen    map[string]bool
	// Fail, when set, is asked for each event at Flush; an error leaves
	// that event and the rest of the flush unstored.
	Fail func(e Emitted) error
}

// Emitted is one event given to a MemoryOutbox.
type Emitted struct {
	Subject string
	MsgID   string
	Payload events.Payload
	// Trace is the span context its headers would carry (invalid: none).
	Trace trace.SpanContext
}

// Emit is eventbus.Outbox.Emit.
func (m *MemoryOutbox) Emit(ctx context.Context, subject string, pl events.Payload, msgID string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pending = append(m.pending, Emitted{Subject: subject, MsgID: msgID, Payload: pl, Trace: trace.SpanContextFromContext(ctx)})
}

// Flush is eventbus.Outbox.Flush.
func (m *MemoryOutbox) Flush(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	pending := m.pending
	m.pending = nil
	if m.seen == nil {
		m.seen = map[string]bool{}
	}
	for _, e := range pending {
		if m.Fail != nil {
			if err := m.Fail(e); err != nil {
				return err
			}
		}
		if !m.seen[e.MsgID] {
			m.seen[e.MsgID] = true
			m.stored = append(m.stored, e)
		}
	}
	return nil
}

// Recheck is eventbus.Outbox.Recheck: nothing to do, Flush stores each message id
// once whenever it came.
func (m *MemoryOutbox) Recheck(time.Time) {}

// Publish is eventbus.Publisher.Publish: Emit, then Flush.
func (m *MemoryOutbox) Publish(ctx context.Context, subject string, pl events.Payload, msgID string) error {
	m.Emit(ctx, subject, pl, msgID)
	return m.Flush(ctx)
}

// Stored returns the events stored so far, in order.
func (m *MemoryOutbox) Stored() []Emitted {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Emitted(nil), m.stored...)
}
