package webview

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// Source is what the web view reads: the state-store's list and
// documents, and a workflow's events and output lines from the streams.
// Every call is a read that a viewer may make.
type Source interface {
	List(ctx context.Context, limit int) ([]events.WorkflowSummary, error)
	// Workflow is the state-store's document, or ErrNotFound.
	Workflow(ctx context.Context, id string) (*Doc, error)
	// Follow sends the events and output lines published since since,
	// those of workflow id only, in stream order, then marks when it has
	// sent all that the streams held (CaughtUp), then goes on with new
	// ones until ctx ends. It returns why it stopped. hosts, when not
	// empty, are the workflow's hosts: only their subjects need reading.
	Follow(ctx context.Context, id string, since time.Time, hosts []string, out chan<- Item) error
	// Lifecycle sends every workflow's lifecycle events published from
	// now on: first the mark that it reads (CaughtUp), then the events
	// in stream order until ctx ends. It returns why it stopped.
	Lifecycle(ctx context.Context, out chan<- Item) error
	// Host is state.host for one host: its nodes across compositions.
	Host(ctx context.Context, host string) ([]events.HostNode, error)
	// Output calls each with every output line the log stream holds of
	// one node of a workflow, in stream order, and returns once it has
	// given all that the stream held when it started (or each failed).
	Output(ctx context.Context, q OutputQuery, each func(*events.LogLine) error) error
}

// OutputQuery names one node of a workflow, on its host, and from when
// its lines can be.
type OutputQuery struct {
	WorkflowID, Host, Formula, Node string
	Since                           time.Time
}

// Item is one thing Follow sends: an event, an output line, or the mark
// that the history has been sent. TraceID is the trace a workflow event
// was published in (its traceparent header), when it has one.
type Item struct {
	Event    *events.Envelope
	Line     *events.LogLine
	CaughtUp bool
	TraceID  string
}

// ErrNotFound: no such workflow.
var ErrNotFound = errors.New("no such workflow")

// NATS is the Source over the bus client (a viewer's connection is
// enough); each request waits the client's timeout.
type NATS struct {
	Client *client.Client
}

// stateErr words the client's errors for the page: a workflow the
// state-store does not know is ErrNotFound.
func stateErr(err error) error {
	var se *client.ServiceError
	var re *client.RequestError
	switch {
	case err == nil:
		return nil
	case errors.Is(err, client.ErrNotFound):
		return ErrNotFound
	case errors.As(err, &se):
		return fmt.Errorf("%s: %s", se.Subject, se.Description)
	case errors.As(err, &re) && errors.Is(err, nats.ErrNoResponders):
		return fmt.Errorf("%s: no state-store answers: is it running?", re.Subject)
	}
	return err
}

// List is state.list.
func (s *NATS) List(ctx context.Context, limit int) ([]events.WorkflowSummary, error) {
	rows, err := s.Client.List(ctx, limit)
	return rows, stateErr(err)
}

// Workflow is state.workflow.
func (s *NATS) Workflow(ctx context.Context, id string) (*Doc, error) {
	var d Doc
	err := s.Client.Request(ctx, events.StateWorkflow, mustJSON(events.WorkflowQuery{WorkflowID: id}), nil, &d)
	if err != nil {
		return nil, stateErr(err)
	}
	return &d, nil
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// Host is state.host for one host.
func (s *NATS) Host(ctx context.Context, host string) ([]events.HostNode, error) {
	nodes, err := s.Client.Host(ctx, host)
	return nodes, stateErr(err)
}

// Output reads the node's log subject from q.Since, up to the last line
// the stream held when it started.
func (s *NATS) Output(ctx context.Context, q OutputQuery, each func(*events.LogLine) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	feed, err := s.Client.Follow(ctx, client.FollowOptions{
		Stream: events.StreamLogs, Subjects: []string{events.HostLogs(q.Host, q.Node)}, Since: q.Since, Skipped: countRefused,
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", events.StreamLogs, err)
	}
	for m, err := range feed.History(s.Client.Timeout()) {
		switch {
		case errors.Is(err, nats.ErrTimeout):
			return fmt.Errorf("read %s: no lines came within %s", events.StreamLogs, s.Client.Timeout())
		case err != nil:
			return fmt.Errorf("read %s: %w", events.StreamLogs, err)
		}
		if l, ok := lineOf(m.Envelope, q); ok {
			if err := each(l); err != nil {
				return err
			}
		}
	}
	return nil
}

// lineOf keeps an admitted event if it is a line of q's node.
func lineOf(env *events.Envelope, q OutputQuery) (*events.LogLine, bool) {
	var l events.LogLine
	if env.Type != events.TypeLogLine || events.DecodeData(env, &l) != nil || l.WorkflowID != q.WorkflowID || l.Formula != q.Formula || l.Node != q.Node {
		return nil, false
	}
	return &l, true
}

// Follow reads the event stream and the log stream with ordered
// consumers from since.
func (s *NATS) Follow(ctx context.Context, id string, since time.Time, hosts []string, out chan<- Item) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	evs := []string{events.WorkflowLifecycle(id), events.AllHostLifecycle, events.AllHealth}
	logs := []string{events.AllLogs}
	if len(hosts) > 0 && len(hosts) <= maxHostFilters {
		evs, logs = evs[:1], nil
		for _, h := range hosts {
			evs = append(evs, events.HostLifecycle(h), events.HostHealth(h))
			logs = append(logs, events.HostLogs(h, "*"))
		}
	}
	caught := make(chan struct{}, 2)
	errs := make(chan error, 2)
	go func() { errs <- s.read(ctx, events.StreamEvents, evs, since, id, out, caught) }()
	go func() { errs <- s.read(ctx, events.StreamLogs, logs, since, id, out, caught) }()
	for n := 0; n < 2; {
		select {
		case <-caught:
			n++
		case err := <-errs:
			return err
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	select {
	case out <- Item{CaughtUp: true}:
	case <-ctx.Done():
		return ctx.Err()
	}
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

// countRefused counts an event that did not come the way its type comes
// (events.Admit: forged, or misrouted); it is never drawn.
func countRefused(m *client.Message, _ error) {
	if m.Envelope != nil {
		refusedEvents.Inc()
	}
}

// Lifecycle reads workflow.*.lifecycle on the event stream with an
// ordered consumer that delivers only new events.
func (s *NATS) Lifecycle(ctx context.Context, out chan<- Item) error {
	feed, err := s.Client.Follow(ctx, client.FollowOptions{
		Stream: events.StreamEvents, Subjects: []string{events.AllWorkflowLifecycle}, Skipped: countRefused,
	})
	if err != nil {
		return fmt.Errorf("read %s: %w", events.StreamEvents, err)
	}
	defer feed.Stop()
	select {
	case out <- Item{CaughtUp: true}:
	case <-ctx.Done():
		return ctx.Err()
	}
	for m, err := range feed.Messages() {
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w", events.StreamEvents, err)
		}
		select {
		case out <- Item{Event: m.Envelope}:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return ctx.Err()
}

// maxHostFilters: a workflow with more hosts is read with wildcards.
const maxHostFilters = 200

// read sends the messages of one stream that are about workflow id, and
// signals caught once it has sent every one the stream held at the start.
func (s *NATS) read(ctx context.Context, stream string, filter []string, since time.Time, id string, out chan<- Item, caught chan<- struct{}) error {
	signalled := false
	signal := func() {
		if !signalled {
			signalled = true
			caught <- struct{}{}
		}
	}
	skipped := func(m *client.Message, err error) {
		countRefused(m, err)
		if m.Pending == 0 {
			signal()
		}
	}
	feed, err := s.Client.Follow(ctx, client.FollowOptions{Stream: stream, Subjects: filter, Since: since, Skipped: skipped})
	if err != nil {
		return fmt.Errorf("read %s: %w", stream, err)
	}
	defer feed.Stop()
	if feed.Pending() == 0 {
		signal()
	}
	for m, err := range feed.Messages() {
		if err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			return fmt.Errorf("read %s: %w", stream, err)
		}
		if it, ok := itemOf(m.Envelope, id); ok {
			if it.Event != nil && it.Event.Type.Family() == events.FamilyWorkflow {
				it.TraceID = TraceIDOf(m.Header)
			}
			select {
			case out <- it:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		if m.Pending == 0 {
			signal()
		}
	}
	return ctx.Err()
}

// itemOf keeps an admitted event if it is about workflow id.
func itemOf(env *events.Envelope, id string) (Item, bool) {
	if env.Type == events.TypeLogLine {
		var l events.LogLine
		if events.DecodeData(env, &l) != nil || l.WorkflowID != id {
			return Item{}, false
		}
		return Item{Line: &l}, true
	}
	if env.Subject != id && !strings.HasPrefix(env.Subject, id+"/") {
		return Item{}, false
	}
	return Item{Event: env}, true
}
