package sshexec

// A host's runner over SSH and its sessions: the slots of a
// connection within sshd's MaxSessions, and sessions sshd refuses.

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"golang.org/x/crypto/ssh"
)

type sshRunner struct {
	pool     *Pool
	address  string
	user     string
	identity string // the host's own key file, or "": the worker's
	via      []Jump // users filled in
	// noAgents runs every durable attempt in a session supervisor, as one
	// runs when no host agent answers (tests of that path set it).
	noAgents bool
}

// entry is the pooled connection the runner's commands use.
func (r *sshRunner) entry() *conn {
	return r.pool.entry(r.address, r.user, r.identity, r.via)
}

// refusedSettle is how long sshd may go on refusing a session before the
// refusal is taken to be its MaxSessions: sshd frees a session's slot a
// moment after the client closed it (once the session's shell, an idle
// agent's too, has exited), so a session opened right after another one
// closed may be refused once or twice.
var refusedSettle = 100 * time.Millisecond

// errOverLimit: the caller's slot is beyond what sshd allows on the
// connection; it went to the connection (reserved), and the caller waits
// for a slot again (acquire, or an idle agent) before it opens a session.
var errOverLimit = errors.New("over the connection's session limit")

// slotSession takes a session slot of c (acquire) and opens a session
// with open (r.session, or what wraps it), taking a slot again while the
// one it took goes to the connection (errOverLimit). It returns holding
// the slot, which the caller gives back with c.touch and c.release; on
// an error the slot is given back.
func (r *sshRunner) slotSession(ctx context.Context, c *conn, open func() (*ssh.Session, *ssh.Client, error)) (*ssh.Session, *ssh.Client, error) {
	for {
		if err := r.acquire(ctx, c); err != nil { // stay within the sessions the connection allows
			return nil, nil, err
		}
		sess, client, err := open()
		if errors.Is(err, errOverLimit) {
			continue // the slot went to the connection: wait for another
		}
		if err != nil {
			c.touch()
			c.release()
			return nil, nil, err
		}
		return sess, client, nil
	}
}

// session opens a session for a caller that holds a slot of c. It returns
// with the slot still held, except with errOverLimit (the slot is given
// up: take one again).
//
// A session sshd refuses (an OpenChannelError: "administratively
// prohibited: open failed" when the connection has its MaxSessions open)
// is dealt with in this order:
//
//   - the connection's idle host agents are closed, giving their sessions
//     back, and the session is asked for again at once;
//   - a refusal that lasts refusedSettle is sshd's limit: with k other
//     sessions of the connection open, the connection's limit becomes k
//     (at least 1) until it is closed for being idle (c.refused); when that
//     leaves the caller's slot beyond the limit, the caller waits for a
//     session of the connection to end instead of asking sshd again;
//   - within the limit it is asked again with a backoff (5 ms doubling to
//     200 ms) until sshd has refused every session on the connection for
//     SessionWait, then the command fails with ErrSessionsRefused, naming
//     MaxSessions (a command queued behind one that failed so fails after
//     refusedSettle, not after SessionWait again).
//
// Every wait ends with ctx, and when the pool drains. A broken connection
// is dropped and redialed once.
func (r *sshRunner) session(ctx context.Context, c *conn) (*ssh.Session, *ssh.Client, error) {
	c.lim.Lock()
	c.trying++
	c.lim.Unlock()
	gaveUp := false // c.refused took the slot, and trying with it
	defer func() {
		if !gaveUp {
			c.lim.Lock()
			c.trying--
			c.lim.Unlock()
		}
	}()
	redialed := false
	var first time.Time // of the refusals in a row
	refusals := 0
	for wait := 5 * time.Millisecond; ; {
		if r.pool.isDraining() {
			return nil, nil, r.drainErr()
		}
		client, err := r.pool.client(ctx, c)
		if err != nil {
			return nil, nil, err
		}
		sess, err := newSession(ctx, client)
		if err != nil && ctx.Err() != nil {
			return nil, nil, cmdrun.EndErr(ctx)
		}
		if err == nil {
			c.lim.Lock()
			c.refusing = time.Time{}
			c.lim.Unlock()
			return sess, client, nil
		}
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) {
			if redialed {
				return nil, nil, fmt.Errorf("%w on %s: %w", hostexec.ErrSession, r.address, err)
			}
			r.pool.drop(c, client)
			redialed = true
			continue
		}
		refusals++
		sshSessionsRefused.Inc()
		now := time.Now()
		if first.IsZero() {
			first = now
		}
		if c.closeIdleAgents() > 0 {
			continue // their sessions end: ask again at once
		}
		if refused := now.Sub(first); refused >= refusedSettle {
			open, limit, lowered, over := c.refused()
			if lowered {
				r.pool.log.Warn("sshd refuses more sessions on this connection: fewer are used (its MaxSessions is below --ssh-max-sessions)",
					"host", r.address, "user", c.user, "sessions", limit, "ssh_max_sessions", cap(c.sem))
			}
			if over {
				gaveUp = true
				return nil, nil, errOverLimit
			}
			// Since sshd refuses every session on the connection: the
			// commands queued behind this one do not wait as long again.
			if since := c.refusedSince(first, now); now.Sub(since) >= r.pool.cfg.SessionWait {
				return nil, nil, &sessionsRefused{fmt.Sprintf("%s: sshd on %s refused every new session for %s (this command's %d times) with %d other sessions of gantry open on the connection: its MaxSessions (default 10) is below gantry's --ssh-max-sessions (%d), or sessions closed earlier have not ended on the host; lower --ssh-max-sessions or raise MaxSessions: %v",
					hostexec.ErrSession, r.address, now.Sub(since).Round(time.Second), refusals, open, cap(c.sem), err)}
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, cmdrun.EndErr(ctx)
		case <-r.pool.draining:
			return nil, nil, r.drainErr()
		case <-time.After(wait):
		}
		wait = min(2*wait, 200*time.Millisecond)
	}
}

// refusedSince notes a refusal at now, and says since when sshd has
// refused every session on c: since first (a caller's first refusal in a
// row), or earlier when another caller's refusals went on until a moment
// before.
func (c *conn) refusedSince(first, now time.Time) time.Time {
	c.lim.Lock()
	defer c.lim.Unlock()
	if c.refusing.IsZero() || first.Sub(c.refusedLast) > time.Second {
		c.refusing = first // a new streak
	}
	c.refusing = minTime(c.refusing, first)
	c.refusedLast = now
	return c.refusing
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// sessionsRefused is a session sshd kept refusing: an ErrSession and an
// ErrSessionsRefused.
type sessionsRefused struct{ msg string }

func (e *sessionsRefused) Error() string { return e.msg }
func (e *sessionsRefused) Unwrap() []error {
	return []error{hostexec.ErrSession, hostexec.ErrSessionsRefused}
}

// refused learns from a session sshd refused to a caller holding a slot
// (counted in trying): with open other sessions of the connection, sshd
// allows no more than open (at least 1) on it, and the connection's limit
// comes down to that (lowered says it did just now); the free slots go to
// the connection at once, those in use as they are given back. over says
// the caller's slot is beyond the limit: it goes to the connection too,
// and the caller is no longer counted as trying.
func (c *conn) refused() (open, limit int, lowered, over bool) {
	c.lim.Lock()
	defer c.lim.Unlock()
	open = max(len(c.sem)-c.reserved-c.trying, 0)
	if l := max(open, 1); l < c.limit {
		c.limit, lowered = l, true
	fill:
		for c.reserved < cap(c.sem)-c.limit {
			select {
			case c.sem <- struct{}{}:
				c.reserved++
			default:
				break fill
			}
		}
	}
	if c.reserved < cap(c.sem)-c.limit {
		c.reserved++
		c.trying--
		return open, c.limit, lowered, true
	}
	return open, c.limit, lowered, false
}

// reserve keeps a slot being given up for the connection when more slots
// are handed out than its limit allows, and says whether it did.
func (c *conn) reserve() bool {
	c.lim.Lock()
	defer c.lim.Unlock()
	if c.reserved < cap(c.sem)-c.limit {
		c.reserved++
		return true
	}
	return false
}

// release gives a slot back (to the connection, while it is over its
// limit).
func (c *conn) release() {
	if !c.reserve() {
		<-c.sem
	}
}

// busy says whether any slot is held but the connection's own.
func (c *conn) busy() bool {
	c.lim.Lock()
	defer c.lim.Unlock()
	return len(c.sem) > c.reserved
}

// prepare opens the session the command will run in, for a caller that
// holds a slot, then calls the command's BeforeStart (which records the
// attempt and announces it running): never while the command still waits
// for its session. When BeforeStart fails, nothing starts and the session
// is closed. errOverLimit: see session.
func (r *sshRunner) prepare(ctx context.Context, c *conn, cmd hostexec.Command) (*ssh.Session, *ssh.Client, error) {
	sess, client, err := r.session(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if err := cmdrun.BeforeStart(cmd); err != nil {
		_ = sess.Close()
		return nil, nil, err
	}
	return sess, client, nil
}

// newSession opens a session of client, giving up when ctx ends: a host
// that hangs after authentication answers no channel open, and x/crypto
// waits for the connection's end. A session opened after that is closed.
func newSession(ctx context.Context, client *ssh.Client) (*ssh.Session, error) {
	type opened struct {
		s   *ssh.Session
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		s, err := client.NewSession()
		ch <- opened{s, err}
	}()
	select {
	case o := <-ch:
		return o.s, o.err
	case <-ctx.Done():
		go func() {
			if o := <-ch; o.s != nil {
				_ = o.s.Close()
			}
		}()
		return nil, cmdrun.EndErr(ctx)
	}
}
