package sshexec

// The SSH pool's connections: their entries, dialing (directly or
// through jump hosts), host keys checked, keys offered, keepalives.

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/internal/cmdrun"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// entry is the pooled connection to user@address through the jump hosts
// via, each of which has an entry of its own. An entry is keyed by its
// path: "user@address" for a host dialed directly (a jump host too, so a
// host that is both a target and a jump host has one connection), and
// "ops@bastion:22>root@10.0.0.11:22" behind jump hosts; a hop with an
// identity file of its own has it in its key ("root@10.0.0.11:22 with
// /keys/a"), so that hosts reached with different keys never share a
// connection.
func (p *Pool) entry(address, user, identity string, via []Jump) *conn {
	p.mu.Lock()
	defer p.mu.Unlock()
	var parent *conn
	key := ""
	hop := func(address, user, identity string) *conn {
		if key != "" {
			key += ">"
		}
		key += user + "@" + address
		if identity != "" {
			key += " with " + identity
		}
		c, ok := p.conns[key]
		if !ok {
			c = &conn{sem: make(chan struct{}, p.cfg.MaxSessions), idle: make(chan *hostAgent, p.cfg.MaxSessions), limit: p.cfg.MaxSessions, address: address, user: user, identity: identity, parent: parent}
			p.conns[key] = c
		}
		parent = c
		return c
	}
	for _, j := range via {
		hop(j.Address, j.User, j.IdentityFile)
	}
	return hop(address, user, identity)
}

// client returns the live connection, dialing if there is none (and, for
// a host behind a jump host, the jump host's first if it has none). Every
// caller waits for the same dial, each only as long as its own ctx: a
// cancelled node stops waiting at once. The dial itself is bounded by
// ConnectTimeout, and ends early when the pool closes.
func (p *Pool) client(ctx context.Context, c *conn) (*ssh.Client, error) {
	c.mu.Lock()
	if cl := c.client; cl != nil {
		c.mu.Unlock()
		return cl, nil
	}
	d := c.dial
	if d == nil {
		base, cancel := context.WithCancel(context.Background())
		d = &dialing{done: make(chan struct{}), cancel: cancel}
		c.dial = d
		p.mu.Lock()
		p.dials[d] = struct{}{}
		p.mu.Unlock()
		go p.setUp(base, c, d)
	}
	c.mu.Unlock()
	select {
	case <-d.done:
		return d.client, d.err
	case <-ctx.Done():
		return nil, cmdrun.EndErr(ctx)
	case <-p.draining:
		return nil, fmt.Errorf("%w: not connected to %s", hostexec.ErrDraining, c.address)
	}
}

// dialing is a connection being set up; done is closed when client or
// err is set. cancel stops it (the pool closes).
type dialing struct {
	done   chan struct{}
	client *ssh.Client
	err    error
	cancel context.CancelFunc
}

// setUp dials c's connection for d and makes it c's live one; Close
// cancels base. A hop behind a jump host gets its whole ConnectTimeout
// once the jump host's connection is up (which has its own).
func (p *Pool) setUp(base context.Context, c *conn, d *dialing) {
	defer func() {
		p.mu.Lock()
		delete(p.dials, d)
		p.mu.Unlock()
		d.cancel()
	}()
	if c.parent != nil {
		_, _ = p.client(base, c.parent) // its error is dial's to report
	}
	ctx, cancel := context.WithTimeout(base, p.cfg.ConnectTimeout)
	defer cancel()
	cl, err := p.connect(ctx, c)
	sshDials.WithLabelValues(dialResult(err)).Inc()
	if err == nil && base.Err() != nil { // the pool closed meanwhile
		_ = cl.Close()
		cl, err = nil, fmt.Errorf("%w to %s: stopped while setting up the connection", hostexec.ErrConnect, c.address)
	}
	c.mu.Lock()
	c.dial = nil
	if err == nil {
		c.client = cl
		c.touch()
	}
	c.mu.Unlock()
	d.client, d.err = cl, err
	close(d.done)
	if err != nil {
		return
	}
	sshOpen.Inc()
	go func() { // forget the connection once it dies
		_ = cl.Wait()
		sshOpen.Dec()
		c.mu.Lock()
		if c.client == cl {
			c.client = nil
		}
		c.mu.Unlock()
	}()
	go p.keepAlive(c, cl)
}

// connect dials and authenticates c's connection within ctx's deadline
// (ConnectTimeout): a host that accepts TCP and says nothing, or stalls
// in key exchange or authentication, fails with the phase named.
func (p *Pool) connect(ctx context.Context, c *conn) (*ssh.Client, error) {
	address, user := c.address, c.user
	signers, closeAgent, err := p.signers(c.identity)
	defer closeAgent()
	if err != nil {
		return nil, fmt.Errorf("%w to %s: %w", hostexec.ErrConnect, address, err)
	}
	hostKey := ssh.InsecureIgnoreHostKey()
	var known *knownDB
	if p.known != nil {
		known, err = p.known.current(false)
		if err != nil {
			return nil, fmt.Errorf("%w to %s: %w", hostexec.ErrConnect, address, err)
		}
		hostKey = func(host string, remote net.Addr, key ssh.PublicKey) error {
			return p.known.check(known, host, remote, key)
		}
	}
	var keyErr error
	var ph handshake
	cfg := &ssh.ClientConfig{
		User: user,
		// One publickey method offering every key: the client tries each
		// method name once, so a second PublicKeys method would never be
		// tried after the first one's keys were refused.
		Auth: []ssh.AuthMethod{ssh.PublicKeys(signers...)},
		HostKeyCallback: func(host string, remote net.Addr, key ssh.PublicKey) error {
			ph.keyed.Store(true)
			err := hostKey(host, remote, key)
			if ke := hostKeyError(address, p.cfg.KnownHosts, key, err, c.jumps()); ke != nil {
				keyErr = ke
				return keyErr
			}
			return err
		},
	}
	nc, err := p.dial(ctx, c)
	if err != nil {
		return nil, err
	}
	if known != nil {
		cfg.HostKeyAlgorithms = hostKeyAlgorithms(known, address, nc.RemoteAddr())
	}
	// The handshake gets what is left of ctx: the connection is closed
	// the moment ctx ends (a channel through a jump host has no deadlines).
	stop := context.AfterFunc(ctx, func() { _ = nc.Close() })
	ph.Conn = nc
	sc, chans, reqs, err := ssh.NewClientConn(&ph, address, cfg)
	if !stop() || err != nil {
		_ = nc.Close()
		switch {
		case keyErr != nil:
			return nil, keyErr
		case ctx.Err() != nil:
			return nil, p.setUpTimedOut(ctx, c, &ph)
		case strings.Contains(err.Error(), "unable to authenticate"):
			return nil, fmt.Errorf("%w as %s@%s: %w", hostexec.ErrAuth, user, address, err)
		}
		return nil, fmt.Errorf("%w to %s: %w", hostexec.ErrConnect, address, err)
	}
	return ssh.NewClient(sc, chans, reqs), nil
}

// keepAlive asks cl every Keepalive whether its peer is still there
// (OpenSSH's keepalive@openssh.com; any answer, even a refusal, will do),
// and closes it once KeepaliveMissed intervals passed without one: the
// sessions on it end, and the next use dials again. It ends with the
// connection.
func (p *Pool) keepAlive(c *conn, cl *ssh.Client) {
	iv := p.cfg.Keepalive
	if iv < 0 {
		return
	}
	dead := make(chan struct{})
	go func() { _ = cl.Wait(); close(dead) }()
	var last atomic.Int64
	last.Store(time.Now().UnixNano())
	t := time.NewTicker(iv)
	defer t.Stop()
	for {
		select {
		case <-dead:
			return
		case <-t.C:
		}
		if silent := time.Since(time.Unix(0, last.Load())); silent > time.Duration(KeepaliveMissed)*iv {
			p.log.Warn("closing an SSH connection whose host stopped answering", "host", c.address, "user", c.user, "silent_for", silent.Round(time.Millisecond).String())
			sshKeepaliveClosed.Inc()
			c.lost.Store(&lostClient{cl, fmt.Errorf("%w: no answer to SSH keepalives for %s (asked every %s; closed after %d unanswered)",
				hostexec.ErrStoppedAnswering, silent.Round(100*time.Millisecond), iv, KeepaliveMissed)})
			_ = cl.Close()
			return
		}
		go func() {
			if _, _, err := cl.SendRequest("keepalive@openssh.com", true, nil); err == nil {
				last.Store(time.Now().UnixNano())
			}
		}()
	}
}

// handshake is a connection being set up, noting how far it got: any
// byte from the server (its banner), and its host key (key exchange done).
type handshake struct {
	net.Conn
	heard atomic.Bool
	keyed atomic.Bool
}

func (h *handshake) Read(b []byte) (int, error) {
	n, err := h.Conn.Read(b)
	if n > 0 {
		h.heard.Store(true)
	}
	return n, err
}

// setUpTimedOut names the phase a set-up that ran out of time (or was
// stopped) was in: "no SSH banner from 10.0.0.5:22 within 15s".
func (p *Pool) setUpTimedOut(ctx context.Context, c *conn, h *handshake) error {
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%w to %s: stopped while setting up the connection", hostexec.ErrConnect, c.address)
	}
	var what string
	switch {
	case !h.heard.Load():
		what = "no SSH banner from " + c.address
	case !h.keyed.Load():
		what = "SSH key exchange with " + c.address + " not done"
	default:
		what = "SSH authentication as " + c.user + "@" + c.address + " not done"
	}
	return &setUpTimeout{fmt.Sprintf("%s: %s within %s%s", hostexec.ErrConnect, what, p.cfg.ConnectTimeout, via(c))}
}

// setUpTimeout is a connection set-up that ran out of time: an ErrConnect
// and a context.DeadlineExceeded, said in the words of its phase.
type setUpTimeout struct{ msg string }

func (e *setUpTimeout) Error() string { return e.msg }
func (e *setUpTimeout) Unwrap() []error {
	return []error{hostexec.ErrConnect, context.DeadlineExceeded}
}

// via says which jump hosts a hop is reached through, if any.
func via(c *conn) string {
	if j := c.jumps(); len(j) > 0 {
		return " (through " + strings.Join(j, ", ") + ")"
	}
	return ""
}

// dial opens the connection to c's address: directly, or as a channel
// of its jump host's connection (dialing that first when it has none).
// A jump connection that turns out broken is dropped and redialed once,
// as a direct one is; a jump host that refuses to forward is not.
func (p *Pool) dial(ctx context.Context, c *conn) (net.Conn, error) {
	if c.parent == nil {
		var d net.Dialer
		nc, err := d.DialContext(ctx, "tcp", c.address)
		if err != nil {
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, &setUpTimeout{fmt.Sprintf("%s: no TCP connection to %s within %s%s", hostexec.ErrConnect, c.address, p.cfg.ConnectTimeout, via(c))}
			}
			return nil, fmt.Errorf("%w to %s: %w", hostexec.ErrConnect, c.address, err)
		}
		return nc, nil
	}
	j := c.parent
	jump := j.user + "@" + j.address
	for redialed := false; ; redialed = true {
		jc, err := p.client(ctx, j)
		if err != nil {
			return nil, fmt.Errorf("jump host %s, on the way to %s: %w", jump, c.address, err)
		}
		dctx, cancel := context.WithTimeout(ctx, p.cfg.ConnectTimeout)
		nc, err := jc.DialContext(dctx, "tcp", c.address)
		timedOut := dctx.Err() != nil
		cancel()
		if err == nil {
			return nc, nil
		}
		var oce *ssh.OpenChannelError
		switch {
		case errors.As(err, &oce) && oce.Reason == ssh.Prohibited:
			return nil, fmt.Errorf("%w to %s: jump host %s refused to forward to it (its sshd needs AllowTcpForwarding yes, and no permitopen that leaves the address out): %w", hostexec.ErrConnect, c.address, jump, err)
		case errors.As(err, &oce):
			return nil, fmt.Errorf("%w to %s: jump host %s could not connect to it: %w", hostexec.ErrConnect, c.address, jump, err)
		case timedOut || redialed:
			// A slow target is no reason to drop a jump connection other
			// hosts may be using.
			return nil, fmt.Errorf("%w to %s through jump host %s: %w", hostexec.ErrConnect, c.address, jump, err)
		}
		p.drop(j, jc)
	}
}

// signers returns the keys to offer: the host's identity file's
// (identity, when not "") or the worker's key file's first, then the
// agent's (the key file is the operator's explicit choice, and sshd counts
// every refused key towards MaxAuthTries). The agent connection signs
// during the handshake; closeAgent ends it afterwards. An unreachable
// agent is skipped when a key file is there (logged once until it works
// again).
func (p *Pool) signers(identity string) (_ []ssh.Signer, closeAgent func(), _ error) {
	closeAgent = func() {}
	var agentKeys []ssh.Signer
	var agentErr error
	if p.agentSock != "" {
		agentKeys, closeAgent, agentErr = p.agentSigners()
	}
	signers := p.keys
	if identity != "" {
		path, err := expandHome(identity, p.home)
		if err != nil {
			return nil, closeAgent, fmt.Errorf("%w: identity_file %w", hostexec.ErrIdentity, err)
		}
		if signers, err = identitySigners(path, agentKeys); err != nil {
			return nil, closeAgent, err
		}
	}
	signers = append([]ssh.Signer(nil), signers...)
	if p.agentSock == "" {
		return signers, closeAgent, nil
	}
	if agentErr != nil {
		if len(signers) == 0 {
			return nil, closeAgent, fmt.Errorf("no key to offer: no key file and the ssh-agent at $SSH_AUTH_SOCK failed: %w", agentErr)
		}
		if !p.agentDown.Swap(true) {
			p.log.Warn("ssh-agent unavailable: offering the key file only", "err", agentErr)
		}
		return signers, closeAgent, nil
	}
	p.agentDown.Store(false)
	seen := map[string]bool{}
	for _, s := range signers {
		seen[string(s.PublicKey().Marshal())] = true
	}
	for _, s := range agentKeys {
		if k := string(s.PublicKey().Marshal()); !seen[k] {
			seen[k] = true
			signers = append(signers, s)
		}
	}
	return signers, closeAgent, nil
}

// agentSigners are the ssh-agent's keys (its certificates among them, as
// they are), on a connection that closeAgent ends.
func (p *Pool) agentSigners() (_ []ssh.Signer, closeAgent func(), _ error) {
	closeAgent = func() {}
	ac, err := net.DialTimeout("unix", p.agentSock, p.cfg.ConnectTimeout)
	if err != nil {
		return nil, closeAgent, err
	}
	closeAgent = func() { _ = ac.Close() }
	keys, err := agent.NewClient(ac).Signers()
	return keys, closeAgent, err
}

func (p *Pool) drop(c *conn, cl *ssh.Client) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.client == cl {
		_ = cl.Close()
		c.client = nil
	}
}

func hostOf(addr string) string {
	h, _, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	return h
}

func portOf(addr string) string {
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		return "22"
	}
	return p
}
