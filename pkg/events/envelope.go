// Package events is gantry's versioned wire contract: the CloudEvents 1.0
// envelope, one typed payload per event, the records and replies the
// services store and answer with, the subjects they travel on, the names
// of the streams, consumers and buckets that hold them, and who may use
// which (the permission model). Services talk only through it. It links no
// NATS package: the JetStream plumbing that carries it is pkg/eventbus.
package events

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/google/uuid"
)

// SpecVersion is the CloudEvents version of every envelope.
const SpecVersion = "1.0"

// ContentType is the datacontenttype of every envelope.
const ContentType = "application/json"

// MaxEventBytes bounds an encoded event; a larger one is rejected on parse.
const MaxEventBytes = 1 << 20

// Sentinel errors for bad input; wrapped with the detail.
var (
	ErrMalformed   = errors.New("malformed event")
	ErrUnknownType = errors.New("unknown event type")
)

// Envelope is a CloudEvents 1.0 structured-mode JSON document.
type Envelope struct {
	SpecVersion     string          `json:"specversion"`
	ID              string          `json:"id"`
	Source          string          `json:"source"`
	Type            Type            `json:"type"`
	Time            time.Time       `json:"time"`
	Subject         string          `json:"subject,omitempty"`
	DataContentType string          `json:"datacontenttype"`
	DataSchema      string          `json:"dataschema"`
	Data            json.RawMessage `json:"data"`
}

// SeenKey is what a reader that takes each event once keys it by: its id
// within its type. Admit binds a type to the subjects and identities it
// may come from, so an event of one type, whatever id it carries, never
// shadows another type's (a health event with the id of a workflow's end).
func (e *Envelope) SeenKey() string { return string(e.Type) + " " + e.ID }

// Payload is implemented by every event's data struct.
type Payload interface {
	// EventType is the CloudEvents type for this payload.
	EventType() Type
	// EventSubject is the CloudEvents subject attribute (what it is about).
	EventSubject() string
	// Validate reports what is missing or wrong in a decoded payload.
	Validate() error
}

// New wraps a payload in an envelope with a fresh id, the given source
// ("service/instance") and the current time.
func New(source string, p Payload) (*Envelope, error) {
	return NewAt(uuid.NewString(), source, time.Now().UTC(), p)
}

// NewAt is New with the id and time given, for deterministic ids (so a
// retried publish dedupes) and for tests.
func NewAt(id, source string, at time.Time, p Payload) (*Envelope, error) {
	data, err := json.Marshal(p)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", p.EventType(), err)
	}
	t := p.EventType()
	return &Envelope{
		SpecVersion:     SpecVersion,
		ID:              id,
		Source:          source,
		Type:            t,
		Time:            at.UTC(),
		Subject:         p.EventSubject(),
		DataContentType: ContentType,
		DataSchema:      t.Schema(),
		Data:            data,
	}, nil
}

// envelopeHead is how every envelope New makes is written up to its
// type: specversion, id, source, then type.
var envelopeHead = [...]string{`{"specversion":"` + SpecVersion + `","id":"`, `","source":"`, `","type":"`}

// PeekType reads an encoded envelope's type from its head, without
// reading the rest, for a consumer that steps on some types only and
// passes the others by unread (consume.Options.Skip). It knows the head
// only as New's envelopes are written (specversion, id, source and type
// first, each a string without escapes): for anything else ok is false,
// and the envelope is to be read in full. Parse refuses an envelope whose
// type is not the one its head names (a second "type" member), so no
// reader decides on another type than PeekType says.
func PeekType(b []byte) (t Type, ok bool) {
	rest := b
	for i, part := range envelopeHead {
		if !bytes.HasPrefix(rest, []byte(part)) {
			return "", false
		}
		rest = rest[len(part):]
		end := bytes.IndexByte(rest, '"')
		if end < 0 || bytes.IndexByte(rest[:end], '\\') >= 0 {
			return "", false
		}
		if i == len(envelopeHead)-1 {
			return Type(rest[:end]), true
		}
		rest = rest[end:]
	}
	return "", false
}

// Parse decodes and checks an envelope: the required CloudEvents
// attributes, a known type, and a bounded size. It does not decode Data.
func Parse(b []byte) (*Envelope, error) {
	if len(b) > MaxEventBytes {
		return nil, fmt.Errorf("%w: %d bytes, over the %d-byte limit", ErrMalformed, len(b), MaxEventBytes)
	}
	var env Envelope
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	var missing []string
	if env.SpecVersion != SpecVersion {
		return nil, fmt.Errorf("%w: specversion %q, want %q", ErrMalformed, env.SpecVersion, SpecVersion)
	}
	for name, v := range map[string]string{"id": env.ID, "source": env.Source, "type": string(env.Type)} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		slices.Sort(missing)
		return nil, fmt.Errorf("%w: missing %s", ErrMalformed, strings.Join(missing, ", "))
	}
	if env.DataContentType != "" && env.DataContentType != ContentType {
		return nil, fmt.Errorf("%w: datacontenttype %q, want %q", ErrMalformed, env.DataContentType, ContentType)
	}
	if !env.Type.Known() {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, env.Type)
	}
	if head, ok := PeekType(b); ok && head != env.Type {
		return nil, fmt.Errorf("%w: two types, %q and %q", ErrMalformed, head, env.Type)
	}
	if len(bytes.TrimSpace(env.Data)) == 0 || bytes.Equal(bytes.TrimSpace(env.Data), []byte("null")) {
		return nil, fmt.Errorf("%w: %s has no data", ErrMalformed, env.Type)
	}
	return &env, nil
}

// DecodeData decodes an envelope's data into p and validates it. The data
// must be of p's family (a node event into *NodeEvent, ...).
func DecodeData(env *Envelope, p Payload) error {
	if err := json.Unmarshal(env.Data, p); err != nil {
		return fmt.Errorf("%w: %s data: %w", ErrMalformed, env.Type, err)
	}
	if env.Type.Family() != p.EventType().Family() {
		return fmt.Errorf("%w: %s does not carry a %s", ErrMalformed, env.Type, p.EventType().Family())
	}
	if err := p.Validate(); err != nil {
		return fmt.Errorf("%w: %s: %w", ErrMalformed, env.Type, err)
	}
	return nil
}

// Payload decodes the envelope's data into the payload of its type and
// validates it: a *WorkflowEvent (or *WorkflowPruned for
// gantry.workflow.pruned), *FormulaEvent, *NodeEvent, *HealthEvent,
// *LogLine, *ProgressEvent, *RolloutEvent, *Dispatch or *GateRequest, for
// a consumer to type-switch on. Its error wraps ErrUnknownType for a type
// this version does not define, ErrMalformed for data that is not the
// type's payload.
func (e *Envelope) Payload() (Payload, error) {
	p := newPayload(e.Type)
	if p == nil {
		return nil, fmt.Errorf("%w: %q", ErrUnknownType, e.Type)
	}
	if err := DecodeData(e, p); err != nil {
		return nil, err
	}
	return p, nil
}

// newPayload is an empty payload of type t (nil for a type this version
// does not define): the one place a type's payload struct is chosen.
func newPayload(t Type) Payload {
	if !t.Known() {
		return nil
	}
	if t == TypeWorkflowPruned {
		return &WorkflowPruned{}
	}
	switch t.Family() {
	case FamilyWorkflow:
		return &WorkflowEvent{}
	case FamilyFormula:
		return &FormulaEvent{}
	case FamilyNode:
		return &NodeEvent{}
	case FamilyHealth:
		return &HealthEvent{}
	case FamilyLog:
		return &LogLine{}
	case FamilyProgress:
		return &ProgressEvent{}
	case FamilyRollout:
		return &RolloutEvent{}
	}
	switch t {
	case TypeDispatch:
		return &Dispatch{}
	case TypeGateRequest:
		return &GateRequest{}
	}
	return nil
}

// Decode parses an envelope and its data in one step.
func Decode[P any, PP interface {
	*P
	Payload
}](b []byte) (*Envelope, *P, error) {
	env, err := Parse(b)
	if err != nil {
		return nil, nil, err
	}
	p := PP(new(P))
	if err := DecodeData(env, p); err != nil {
		return env, nil, err
	}
	return env, (*P)(p), nil
}
