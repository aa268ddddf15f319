package eventbus

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go/jetstream"
)

// mergeSpans sorts spans and joins those that overlap.
func mergeSpans(spans []events.Span) []events.Span {
	spans = slices.Clone(spans)
	slices.SortFunc(spans, func(a, b events.Span) int { return a.From.Compare(b.From) })
	var out []events.Span
	for _, s := range spans {
		if n := len(out); n > 0 && !s.From.After(out[n-1].Until) {
			if s.Until.After(out[n-1].Until) {
				out[n-1].Until = s.Until
			}
			continue
		}
		out = append(out, s)
	}
	return out
}

// RemoveWorkflowMessages finds the messages of the workflows in ids in
// stream, published within spans, and deletes each by its sequence (none
// when dryRun). A workflow's pruned event is left: it is how the services
// that follow the stream learn of the prune. It returns what it found.
// The reader needs the stream's reader permissions (an ordered consumer)
// and, unless dryRun, $JS.API.STREAM.MSG.DELETE.<stream>.
func RemoveWorkflowMessages(ctx context.Context, js jetstream.JetStream, stream string, ids map[string]bool, spans []events.Span, dryRun bool) (events.StoreSize, error) {
	var found events.StoreSize
	if len(ids) == 0 {
		return found, nil
	}
	str, err := js.Stream(ctx, stream)
	if err != nil {
		return found, fmt.Errorf("stream %s: %w", stream, err)
	}
	for _, sp := range mergeSpans(spans) {
		cons, err := str.OrderedConsumer(ctx, jetstream.OrderedConsumerConfig{DeliverPolicy: jetstream.DeliverByStartTimePolicy, OptStartTime: &sp.From})
		if err != nil {
			return found, fmt.Errorf("read %s: %w", stream, err)
		}
		if err := scanSpan(ctx, str, cons, sp, ids, dryRun, &found); err != nil {
			return found, fmt.Errorf("remove from %s: %w", stream, err)
		}
	}
	return found, nil
}

func scanSpan(ctx context.Context, str jetstream.Stream, cons jetstream.Consumer, sp events.Span, ids map[string]bool, dryRun bool, found *events.StoreSize) error {
	for {
		batch, err := cons.FetchNoWait(512)
		if err != nil {
			return err
		}
		n := 0
		for m := range batch.Messages() {
			n++
			meta, err := m.Metadata()
			if err != nil {
				return err
			}
			if meta.Timestamp.After(sp.Until) {
				return nil
			}
			id, t := events.WorkflowOfMessage(m.Data())
			if !ids[id] || t == events.TypeWorkflowPruned {
				continue
			}
			found.Messages++
			found.Bytes += uint64(messageSize(m))
			if dryRun {
				continue
			}
			if err := str.DeleteMsg(ctx, meta.Sequence.Stream); err != nil && !gone(err) {
				return fmt.Errorf("delete message %d: %w", meta.Sequence.Stream, err)
			}
		}
		if err := batch.Error(); err != nil && !errors.Is(err, jetstream.ErrNoMessages) {
			return err
		}
		if n == 0 {
			return nil
		}
	}
}

// gone says a delete found no message there: another prune (a replica,
// the retention setting) deleted it first.
func gone(err error) bool {
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return true
	}
	msg := err.Error()
	return strings.Contains(msg, "no message found") || strings.Contains(msg, "10037")
}

// messageSize is about what a message counts for in a stream's bytes:
// subject, headers, data and the store's own per-message bytes (measured:
// within about 1% for gantry's events).
func messageSize(m jetstream.Msg) int {
	n := len(m.Subject()) + len(m.Data()) + 30
	if len(m.Headers()) > 0 {
		n += len("NATS/1.0\r\n\r\n")
	}
	for k, vs := range m.Headers() {
		for _, v := range vs {
			n += len(k) + len(v) + 4
		}
	}
	return n
}
