package events

// W3C trace context travels in NATS message headers: every event, dispatch
// and gate request a service publishes with a span context in its ctx
// carries `traceparent` (and `tracestate` when there is one), and the
// submit request carries the submitter's. The headers are part of the wire
// contract; the payloads never carry trace ids.
const (
	TraceParentHeader = "traceparent"
	TraceStateHeader  = "tracestate"
)
