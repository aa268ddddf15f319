package eventbus

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// Whether a publish whose acknowledgement never came was stored cannot be
// left to JetStream's duplicate window: a copy can be stored long after
// it was sent (a stream leader that lost its quorum keeps what it was
// given, and the next leader stores it when the cluster is whole again,
// however long that takes, with the time it was sent), and a copy sent
// again after the window is stored a second time. So before an event
// that may already be stored is sent again, its stream is read for it:
// the messages on its subject since its first copy could have been
// stored, for its Nats-Msg-Id. Only the stream's leader answers that
// read, and a new leader answers only once it has stored everything
// earlier leaders were given that it will ever store, so a copy the read
// does not find is never stored afterwards, but for one it still has in
// flight: so the event is sent again on the condition that the last
// message on its subject is still the last the read found
// (Nats-Expected-Last-Subject-Sequence), which the leader refuses while
// any message on the subject is in flight. A refusal is read on from,
// and tried again. Only an event in doubt costs a read; a publish
// acknowledged at the first try costs nothing more.

// ClockSkew is how far the clock of a NATS server may be behind this
// process's: a copy of an event sent at time t is looked for among the
// messages the stream stored from t-ClockSkew on.
const ClockSkew = time.Minute

// scan is what a subject's messages since a time say: the message ids
// stored on it, read up to a sequence. It reads on from there when asked
// again: a message stored later always has a higher sequence.
type scan struct {
	subject, stream string
	since           time.Time
	next            uint64 // the next sequence to read; 0 before the first read
	ids             map[string]bool
}

// scans are the scans of an outbox (or of one publish), by subject.
type scans map[string]*scan

// doubt says a copy of an event on subject may have been stored since
// since; the scan of the subject starts over if it started later. Only
// the event stream is read: work (dispatches, gate requests) leaves its
// work-queue stream once taken, so a read could not tell, and work sent
// twice is done once (the node records) — it is sent again as before,
// under its message id.
func (s scans) doubt(subject string, since time.Time) {
	if c, ok := s[subject]; ok && !c.since.After(since) {
		return
	}
	if stream := events.StreamOf(subject); stream == events.StreamEvents {
		s[subject] = &scan{subject: subject, stream: stream, since: since, ids: map[string]bool{}}
	}
}

// inDoubt says whether a copy of an event on subject may be stored.
func (s scans) inDoubt(subject string) bool { return s[subject] != nil }

// stored says whether the stream holds msgID on subject since the
// subject's doubt, reading what it stored since the last look, and the
// sequence of the last message on subject.
func (p *Publisher) stored(ctx context.Context, s scans, subject, msgID string) (bool, uint64, error) {
	c := s[subject]
	if err := p.readOn(ctx, c); err != nil {
		return false, 0, fmt.Errorf("look for %s on %s: %w", msgID, subject, err)
	}
	return c.ids[msgID], c.last(), nil
}

// msgGetRequest and msgGetResponse are the JetStream API's message get,
// which only a stream's leader answers (a direct get, which any replica
// answers, would not do: a replica may be behind).
type msgGetRequest struct {
	Seq       uint64     `json:"seq,omitempty"`
	NextFor   string     `json:"next_by_subj,omitempty"`
	LastFor   string     `json:"last_by_subj,omitempty"`
	StartTime *time.Time `json:"start_time,omitempty"`
}

type msgGetResponse struct {
	Error *struct {
		Code        int    `json:"code"`
		ErrCode     int    `json:"err_code"`
		Description string `json:"description"`
	} `json:"error"`
	Message *struct {
		Seq    uint64 `json:"seq"`
		Header []byte `json:"hdrs"`
	} `json:"message"`
}

// errNoMessage is the API's answer when no message is left to read.
const errNoMessage = 10037

// readOn reads the subject's messages from where the scan stopped to the
// end of the stream, keeping their message ids. The first read starts at
// the scan's time; when nothing is stored on the subject since then, the
// scan goes on from its last message.
func (p *Publisher) readOn(ctx context.Context, c *scan) error {
	for {
		req := msgGetRequest{NextFor: c.subject, Seq: c.next}
		if c.next == 0 {
			req.StartTime = &c.since
		}
		seq, id, err := p.msgGet(ctx, c.stream, req)
		if err == nil && seq == 0 && c.next == 0 {
			seq, id, err = p.msgGet(ctx, c.stream, msgGetRequest{LastFor: c.subject})
			c.next = seq + 1
		}
		if err != nil || seq == 0 {
			return err
		}
		c.ids[id] = true
		c.next = seq + 1
	}
}

// last is the sequence of the subject's last message the scan read (0:
// none is stored on it).
func (c *scan) last() uint64 { return c.next - 1 }

// msgGet asks the stream's leader for the first message of a request: its
// sequence (0 when there is none) and message id.
func (p *Publisher) msgGet(ctx context.Context, stream string, req msgGetRequest) (uint64, string, error) {
	seq, h, err := leaderMsgGet(ctx, p.conn(), stream, req)
	return seq, h.Get(nats.MsgIdHdr), err
}

// leaderMsgGet asks the stream's leader for the first message of a
// request: its sequence (0 when there is none) and headers.
func leaderMsgGet(ctx context.Context, nc *nats.Conn, stream string, req msgGetRequest) (uint64, nats.Header, error) {
	b, err := json.Marshal(req)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, PublishTimeout)
	defer cancel()
	msg, err := nc.RequestWithContext(ctx, "$JS.API.STREAM.MSG.GET."+stream, b)
	if err != nil {
		return 0, nil, err
	}
	var resp msgGetResponse
	if err := json.Unmarshal(msg.Data, &resp); err != nil {
		return 0, nil, fmt.Errorf("message get on %s: %w", stream, err)
	}
	switch {
	case resp.Error != nil && resp.Error.ErrCode == errNoMessage:
		return 0, nil, nil
	case resp.Error != nil:
		return 0, nil, fmt.Errorf("message get on %s: %s (%d)", stream, resp.Error.Description, resp.Error.ErrCode)
	case resp.Message == nil:
		return 0, nil, fmt.Errorf("message get on %s: empty answer", stream)
	}
	var h nats.Header
	if len(resp.Message.Header) > 0 {
		if h, err = nats.DecodeHeadersMsg(resp.Message.Header); err != nil {
			return 0, nil, fmt.Errorf("message get on %s: headers: %w", stream, err)
		}
	}
	return resp.Message.Seq, h, nil
}

// conn is the publisher's connection.
func (p *Publisher) conn() *nats.Conn {
	if p.NC != nil {
		return p.NC
	}
	return p.JS.Conn()
}

// LastSeq is the stream sequence of the last message stream holds on
// subject (a filter: wildcards allowed), 0 when none, as the stream's
// leader answers: it counts every message stored, where a consumer's
// count of what it has left (NumPending) may not yet count one whose
// publish was just acknowledged.
func LastSeq(ctx context.Context, nc *nats.Conn, stream, subject string) (uint64, error) {
	seq, _, err := leaderMsgGet(ctx, nc, stream, msgGetRequest{LastFor: subject})
	return seq, err
}
