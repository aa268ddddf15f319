package hostexec

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/agent"
)

// SSHConfig configures SSH connections.
type SSHConfig struct {
	// KeyFile is a private key (unencrypted; use the agent for encrypted
	// keys). Empty: the first of ~/.ssh/id_ed25519, id_ecdsa, id_rsa.
	// A user certificate for it is offered first: CertFile, else
	// KeyFile-cert.pub when there is one. A host with an identity file of
	// its own (Target.IdentityFile) is offered that key instead.
	KeyFile  string
	CertFile string
	// UseAgent also offers the keys of the ssh-agent at $SSH_AUTH_SOCK,
	// after the key file's, in the same publickey attempt.
	UseAgent bool
	// KnownHosts is the known_hosts file. Empty: ~/.ssh/known_hosts. It is
	// read again when it changed, before a new connection.
	KnownHosts string
	// InsecureIgnoreHostKey connects to hosts whatever their key. Only an
	// operator's explicit choice may set it.
	InsecureIgnoreHostKey bool
	DefaultUser           string // when a host names none (default root; --ssh-user, $USER)
	MaxSessions           int    // sessions at once per connection (default 8; OpenSSH allows 10)
	// ConnectTimeout bounds setting up one hop's connection: TCP, the
	// server's banner, key exchange and authentication together
	// (default DefaultConnectTimeout).
	ConnectTimeout time.Duration
	// Keepalive is how often an open connection is asked whether its
	// peer is still there; after KeepaliveMissed intervals with no answer
	// it is closed (default DefaultKeepalive; negative: never asked).
	Keepalive time.Duration
	// Idle closes a connection that ran no session for that long
	// (default DefaultSSHIdle; negative: never).
	Idle time.Duration
	// SessionWait bounds how long a session that sshd keeps refusing is
	// tried again while none of the connection's own sessions is left to
	// wait for; then the command fails with ErrSessionsRefused (default
	// DefaultSessionWait). See sshRunner.session.
	SessionWait time.Duration
	Logger      *slog.Logger
}

// UserEnv is the variable of --ssh-user: the user the worker runs as.
const UserEnv = "USER"

// RegisterFlags adds the SSH flags a service takes. Their variables are
// GANTRY_<FLAG>, but --ssh-user's: UserEnv.
func (c *SSHConfig) RegisterFlags(fs *flag.FlagSet) {
	fs.StringVar(&c.KeyFile, "ssh-key", "", "SSH private key ($GANTRY_SSH_KEY; default ~/.ssh/id_ed25519, id_ecdsa, id_rsa)")
	fs.StringVar(&c.CertFile, "ssh-cert", "", "SSH user certificate for the --ssh-key key ($GANTRY_SSH_CERT; default KEY-cert.pub beside the key, when there is one)")
	fs.StringVar(&c.KnownHosts, "known-hosts", "", "known_hosts file ($GANTRY_KNOWN_HOSTS; default ~/.ssh/known_hosts)")
	fs.StringVar(&c.DefaultUser, "ssh-user", "", "user to log in as on hosts that name none ($"+UserEnv+": the user the worker runs as; default root)")
	fs.BoolVar(&c.InsecureIgnoreHostKey, "insecure-ignore-host-key", false, "connect to hosts whose key is unknown or changed (unsafe)")
	fs.BoolVar(&c.UseAgent, "ssh-agent", true, "also use the keys of the ssh-agent at $SSH_AUTH_SOCK")
	fs.IntVar(&c.MaxSessions, "ssh-max-sessions", 8, "SSH sessions at once per host connection (sshd's MaxSessions is 10 by default)")
	fs.DurationVar(&c.Idle, "ssh-idle", DefaultSSHIdle, "close a host's SSH connection after it ran nothing for this long (negative: keep it open)")
	c.RegisterConnectFlags(fs)
	c.RegisterSessionWaitFlag(fs)
}

// DefaultSessionWait is --ssh-session-wait's default.
const DefaultSessionWait = 30 * time.Second

// RegisterSessionWaitFlag adds --ssh-session-wait.
func (c *SSHConfig) RegisterSessionWaitFlag(fs *flag.FlagSet) {
	fs.DurationVar(&c.SessionWait, "ssh-session-wait", DefaultSessionWait, "how long a new SSH session that the host's sshd keeps refusing (its MaxSessions) is tried again, with none of gantry's own sessions on the connection to wait for, before the node fails")
}

// DefaultConnectTimeout is --ssh-connect-timeout's default.
const DefaultConnectTimeout = 15 * time.Second

// DefaultKeepalive is --ssh-keepalive's default: a peer that stopped
// answering is found within (KeepaliveMissed+1) of it, a minute.
const DefaultKeepalive = 15 * time.Second

// KeepaliveMissed is how many keepalive intervals may pass without an
// answer before a connection is given up as dead, as OpenSSH's
// ServerAliveCountMax.
const KeepaliveMissed = 3

// RegisterConnectFlags adds --ssh-connect-timeout and --ssh-keepalive.
func (c *SSHConfig) RegisterConnectFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.ConnectTimeout, "ssh-connect-timeout", DefaultConnectTimeout, "bound on setting up each hop's SSH connection: TCP, banner, key exchange and authentication")
	fs.DurationVar(&c.Keepalive, "ssh-keepalive", DefaultKeepalive, "ask open SSH connections this often whether the host still answers; 3 unanswered in a row close it (negative: never)")
}

// DefaultKeyFiles are tried in order when no key file is given, as OpenSSH does.
var DefaultKeyFiles = []string{"id_ed25519", "id_ecdsa", "id_rsa"}

// DefaultSSHPaths returns the key file and known_hosts OpenSSH would use.
func DefaultSSHPaths() (keyFile, knownHosts string) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", ""
	}
	dir := filepath.Join(home, ".ssh")
	for _, k := range DefaultKeyFiles {
		if _, err := os.Stat(filepath.Join(dir, k)); err == nil {
			keyFile = filepath.Join(dir, k)
			break
		}
	}
	return keyFile, filepath.Join(dir, "known_hosts")
}

// Pool holds one SSH connection per user@host:port and hands out runners.
// A host behind jump hosts is reached through a connection of its own,
// dialed through the jump host's connection; each jump host's connection
// is pooled as well, and shared by every host behind it.
type Pool struct {
	cfg       SSHConfig
	keys      []ssh.Signer // from the key file
	agentSock string       // $SSH_AUTH_SOCK when the agent is used
	agentDown atomic.Bool  // its failure was logged
	known     *knownHosts  // nil when host keys are not checked
	log       *slog.Logger
	mu        sync.Mutex
	conns     map[string]*conn
	dials     map[*dialing]struct{} // connections being set up: Close stops them
	closed    bool                  // Close was called
	stop      chan struct{}         // closed by Close: the idle reaper ends
	drainOnce sync.Once
	draining  chan struct{} // closed by Drain: nothing new starts
}

type conn struct {
	mu     sync.Mutex  // guards client and dial
	client *ssh.Client // the live connection, nil when none
	dial   *dialing    // the connection being set up, nil when none
	// sem holds a token per session slot in use: a session (plain, a
	// follow session, a host agent's, idle or not) or one being opened;
	// its capacity is MaxSessions. Slots are given back with release.
	sem  chan struct{}
	idle chan *hostAgent // idle host agents, each holding a slot of sem
	// The sessions sshd allows on the connection as learned from its
	// refusals (see sshRunner.session), guarded by lim: limit starts at
	// cap(sem) and only goes down until the connection is closed for being
	// idle (forgetLimit); the connection itself holds reserved
	// tokens of sem (cap(sem)-limit once it has them all), so that at most
	// limit slots are handed out. trying counts the holders of a slot
	// whose session is being opened. refusing is when sshd began refusing
	// every session asked for on the connection (zero once one opens),
	// refusedLast its latest refusal.
	lim         sync.Mutex
	limit       int
	reserved    int
	trying      int
	refusing    time.Time
	refusedLast time.Time
	address     string // host:port
	user        string
	identity    string       // the host's own key file (resolved), or "": the worker's
	parent      *conn        // the jump host it is reached through; nil: dialed directly
	used        atomic.Int64 // when it was last used (unix ns): idle ones are closed
	// lost is the last connection the keepalives closed, and why.
	lost atomic.Pointer[lostClient]
	// becameOn is, by user to become ("": sudo's default), the client
	// on which sudo -n was found to work (see checkBecome).
	bmu      sync.Mutex
	becameOn map[string]*ssh.Client
}

// lostClient is a connection the keepalives closed: err says how long its
// host had not answered.
type lostClient struct {
	client *ssh.Client
	err    error
}

// lostErr says why the keepalives closed cl; nil when they did not.
func (c *conn) lostErr(cl *ssh.Client) error {
	if l := c.lost.Load(); l != nil && l.client == cl {
		return l.err
	}
	return nil
}

// ended is the error of a command whose connection cl ended before the
// command reported an exit status: the keepalives' reason when they
// closed it.
func (r *sshRunner) ended(c *conn, cl *ssh.Client) error {
	if why := c.lostErr(cl); why != nil {
		return fmt.Errorf("%w on %s: %w: %w", ErrSession, r.address, why, errConnectionEnded)
	}
	return fmt.Errorf("%w on %s: %w", ErrSession, r.address, errConnectionEnded)
}

// jumps is the user@address of each jump host on the way to c, the first
// hop first.
func (c *conn) jumps() []string {
	var out []string
	for j := c.parent; j != nil; j = j.parent {
		out = append(out, j.user+"@"+j.address)
	}
	slices.Reverse(out)
	return out
}

// Jump is a jump host on the way to a host (ssh ProxyJump), or the host
// itself (Pool.HostRunner).
type Jump struct {
	Address string // host:port
	User    string // the default user when empty
	// IdentityFile is a private key on the worker (a leading ~ is the
	// worker's home) offered to this host instead of the worker's key.
	IdentityFile string
}

// NewPool checks the configuration (key readable, known_hosts parseable)
// before any connection is made.
func NewPool(cfg SSHConfig) (*Pool, error) {
	if cfg.MaxSessions <= 0 {
		cfg.MaxSessions = 8
	}
	if cfg.ConnectTimeout <= 0 {
		cfg.ConnectTimeout = DefaultConnectTimeout
	}
	if cfg.Keepalive == 0 {
		cfg.Keepalive = DefaultKeepalive
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.DefaultUser == "" {
		cfg.DefaultUser = "root"
	}
	defKey, defKnown := DefaultSSHPaths()
	if cfg.KeyFile == "" {
		cfg.KeyFile = defKey
	}
	if cfg.KnownHosts == "" {
		cfg.KnownHosts = defKnown
	}
	if cfg.Idle == 0 {
		cfg.Idle = DefaultSSHIdle
	}
	if cfg.SessionWait <= 0 {
		cfg.SessionWait = DefaultSessionWait
	}
	p := &Pool{cfg: cfg, log: cfg.Logger, conns: map[string]*conn{}, dials: map[*dialing]struct{}{}, stop: make(chan struct{}), draining: make(chan struct{})}
	switch {
	case cfg.KeyFile != "":
		keys, err := keySigners(cfg.KeyFile, cfg.CertFile, nil)
		if err != nil {
			return nil, fmt.Errorf("ssh key %w", err)
		}
		p.keys = keys
	case cfg.CertFile != "":
		return nil, fmt.Errorf("ssh certificate %s: no key for it: set --ssh-key (GANTRY_SSH_KEY)", cfg.CertFile)
	}
	if cfg.UseAgent {
		p.agentSock = os.Getenv("SSH_AUTH_SOCK")
	}
	if len(p.keys) == 0 && p.agentSock == "" {
		return nil, errors.New("ssh: no key file found and no ssh-agent: set --ssh-key (GANTRY_SSH_KEY)")
	}
	if cfg.InsecureIgnoreHostKey {
		p.log.Warn("ssh host keys are NOT checked: --insecure-ignore-host-key was given")
	} else {
		p.known = &knownHosts{path: cfg.KnownHosts}
		if _, err := p.known.current(false); err != nil {
			return nil, err
		}
	}
	if cfg.Idle > 0 {
		go p.reapIdle(cfg.Idle, p.stop)
	}
	return p, nil
}

// Runner returns a runner for user@address (address is host:port),
// reached through the jump hosts via, the first hop first. Each hop's host
// key is checked as a direct host's is.
func (p *Pool) Runner(address, user string, via ...Jump) Runner {
	return p.HostRunner(Jump{Address: address, User: user}, via...)
}

// HostRunner returns a runner for the host h, reached through the jump
// hosts via, the first hop first, each with its user and identity file.
func (p *Pool) HostRunner(h Jump, via ...Jump) Runner {
	fill := func(j Jump) Jump {
		if j.User == "" {
			j.User = p.cfg.DefaultUser
		}
		return j
	}
	hops := make([]Jump, len(via))
	for i, j := range via {
		hops[i] = fill(j)
	}
	h = fill(h)
	return &sshRunner{pool: p, address: h.Address, user: h.User, identity: h.IdentityFile, via: hops}
}

// Drain stops new commands from starting, as a worker that is stopping
// should: every Run waiting for a connection, a session slot or a session
// sshd refuses returns ErrDraining at once, as does every later one, with
// nothing started (BeforeStart not called). Commands that started run on
// to their end. It cannot be undone (Close alone leaves the pool usable).
func (p *Pool) Drain() {
	p.drainOnce.Do(func() { close(p.draining) })
}

// isDraining says whether Drain was called.
func (p *Pool) isDraining() bool {
	select {
	case <-p.draining:
		return true
	default:
		return false
	}
}

// drainErr is the error of a command not started because the pool drains.
func (r *sshRunner) drainErr() error {
	return fmt.Errorf("%w: the command on %s was not started", ErrDraining, r.address)
}

// Close closes every connection.
func (p *Pool) Close() {
	p.mu.Lock()
	if !p.closed {
		close(p.stop)
	}
	p.closed = true
	conns := p.conns
	p.conns = map[string]*conn{}
	for d := range p.dials {
		d.cancel()
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.mu.Lock()
		cl := c.client
		c.client = nil
		c.mu.Unlock()
		if cl != nil {
			_ = cl.Close()
		}
	}
}

// isClosed says whether Close was called (the worker is stopping: an
// attempt is left to run on its host for the next one to re-attach to).
func (p *Pool) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

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
		return nil, endErr(ctx)
	case <-p.draining:
		return nil, fmt.Errorf("%w: not connected to %s", ErrDraining, c.address)
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
		cl, err = nil, fmt.Errorf("%w to %s: stopped while setting up the connection", ErrConnect, c.address)
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
		return nil, fmt.Errorf("%w to %s: %w", ErrConnect, address, err)
	}
	hostKey := ssh.InsecureIgnoreHostKey()
	var known *knownDB
	if p.known != nil {
		known, err = p.known.current(false)
		if err != nil {
			return nil, fmt.Errorf("%w to %s: %w", ErrConnect, address, err)
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
			return nil, fmt.Errorf("%w as %s@%s: %w", ErrAuth, user, address, err)
		}
		return nil, fmt.Errorf("%w to %s: %w", ErrConnect, address, err)
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
				ErrStoppedAnswering, silent.Round(100*time.Millisecond), iv, KeepaliveMissed)})
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
		return fmt.Errorf("%w to %s: stopped while setting up the connection", ErrConnect, c.address)
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
	return &setUpTimeout{fmt.Sprintf("%s: %s within %s%s", ErrConnect, what, p.cfg.ConnectTimeout, via(c))}
}

// setUpTimeout is a connection set-up that ran out of time: an ErrConnect
// and a context.DeadlineExceeded, said in the words of its phase.
type setUpTimeout struct{ msg string }

func (e *setUpTimeout) Error() string   { return e.msg }
func (e *setUpTimeout) Unwrap() []error { return []error{ErrConnect, context.DeadlineExceeded} }

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
				return nil, &setUpTimeout{fmt.Sprintf("%s: no TCP connection to %s within %s%s", ErrConnect, c.address, p.cfg.ConnectTimeout, via(c))}
			}
			return nil, fmt.Errorf("%w to %s: %w", ErrConnect, c.address, err)
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
			return nil, fmt.Errorf("%w to %s: jump host %s refused to forward to it (its sshd needs AllowTcpForwarding yes, and no permitopen that leaves the address out): %w", ErrConnect, c.address, jump, err)
		case errors.As(err, &oce):
			return nil, fmt.Errorf("%w to %s: jump host %s could not connect to it: %w", ErrConnect, c.address, jump, err)
		case timedOut || redialed:
			// A slow target is no reason to drop a jump connection other
			// hosts may be using.
			return nil, fmt.Errorf("%w to %s through jump host %s: %w", ErrConnect, c.address, jump, err)
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
		path, err := expandHome(identity)
		if err != nil {
			return nil, closeAgent, fmt.Errorf("%w: identity_file %w", ErrIdentity, err)
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
		sess, err := client.NewSession()
		if err == nil {
			c.lim.Lock()
			c.refusing = time.Time{}
			c.lim.Unlock()
			return sess, client, nil
		}
		var oce *ssh.OpenChannelError
		if !errors.As(err, &oce) {
			if redialed {
				return nil, nil, fmt.Errorf("%w on %s: %w", ErrSession, r.address, err)
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
					ErrSession, r.address, now.Sub(since).Round(time.Second), refusals, open, cap(c.sem), err)}
			}
		}
		select {
		case <-ctx.Done():
			return nil, nil, endErr(ctx)
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

func (e *sessionsRefused) Error() string   { return e.msg }
func (e *sessionsRefused) Unwrap() []error { return []error{ErrSession, ErrSessionsRefused} }

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
func (r *sshRunner) prepare(ctx context.Context, c *conn, cmd Command) (*ssh.Session, *ssh.Client, error) {
	sess, client, err := r.session(ctx, c)
	if err != nil {
		return nil, nil, err
	}
	if err := beforeStart(cmd); err != nil {
		_ = sess.Close()
		return nil, nil, err
	}
	return sess, client, nil
}

// pidMarker starts the first stdout line of every remote command: the
// shell sshd started is a session leader (sshd calls setsid), so its pid
// is the process group of everything the command runs.
const pidMarker = "__gantry_pgid "

// reattachTries bounds how often a durable attempt whose connection ended
// before it reported an exit status is re-attached (reattachWait apart).
var (
	reattachTries = 5
	reattachWait  = time.Second
)

// Run runs cmd. A durable command (cmd.Attempt set) whose connection ends
// after it started, before it reported its exit status, goes on running on
// the host: Run re-attaches to it on a new connection (the output lines
// already handed to OnLine are not handed again) instead of reporting a
// failure, which a retry would have answered with a second copy of the
// command.
func (r *sshRunner) Run(ctx context.Context, cmd Command) (Result, error) {
	if cmd.Stdin != nil && cmd.Attempt != "" {
		return Result{ExitCode: -1, Started: time.Now()}, errStdinDurable
	}
	if cmd.Become {
		if err := r.checkBecome(ctx, r.entry(), cmd.as()); err != nil {
			return Result{ExitCode: -1, Started: time.Now()}, err
		}
	}
	if cmd.Settle {
		return r.settle(ctx, cmd)
	}
	if cmd.Attempt == "" {
		return r.run(ctx, cmd)
	}
	lc := &lineCount{on: cmd.OnLine, delivered: map[Stream]int{}}
	first := cmd
	first.OnLine = lc.first
	res, err := r.runDurable(ctx, first)
	ended := err // why the connection ended, when it did
	for try := 1; try <= reattachTries && errors.Is(err, errConnectionEnded) && !r.pool.isClosed(); try++ {
		ended = err
		r.pool.log.Warn("connection ended while an attempt ran; re-attaching to it", "host", r.address, "attempt", cmd.Attempt, "try", try)
		select {
		case <-ctx.Done():
			return res, err
		case <-time.After(reattachWait):
		}
		again := cmd
		again.BeforeStart = nil // it started: recorded already
		again.OnLine = lc.again()
		if cmd.Timeout > 0 {
			again.Timeout = max(cmd.Timeout-time.Since(res.Started), time.Millisecond)
		}
		started := res.Started
		res, err = r.run(ctx, again)
		res.Started = started
	}
	return res, reattachErr(ended, err)
}

// reattachErr is the error of a durable attempt whose re-attach failed
// with err after its host stopped answering (ended): both said, the host's
// silence first. Any other error is returned as it is.
func reattachErr(ended, err error) error {
	if err == nil || err == ended || errors.Is(err, errConnectionEnded) || !errors.Is(ended, ErrStoppedAnswering) {
		return err
	}
	return fmt.Errorf("%w; re-attaching to the attempt: %w", ended, err)
}

// lineCount hands a durable attempt's output lines to on once, across the
// re-attaches that stream its output again from the start.
type lineCount struct {
	mu        sync.Mutex
	on        func(Stream, string)
	delivered map[Stream]int
}

func (l *lineCount) first(s Stream, line string) {
	l.mu.Lock()
	l.delivered[s]++
	l.mu.Unlock()
	if l.on != nil {
		l.on(s, line)
	}
}

// again is the OnLine of a re-attach: it skips the lines already handed on.
func (l *lineCount) again() func(Stream, string) {
	seen := map[Stream]int{}
	return func(s Stream, line string) {
		l.mu.Lock()
		seen[s]++
		fresh := seen[s] > l.delivered[s]
		if fresh {
			l.delivered[s]++
		}
		l.mu.Unlock()
		if fresh && l.on != nil {
			l.on(s, line)
		}
	}
}

// errConnectionEnded: the connection ended after the command started and
// before it reported an exit status.
var errConnectionEnded = errors.New("the connection ended before the command reported an exit status")

// runDurable runs a durable command in a host agent (agent.go), or in a
// session of its own: when the attempt exists on the host already (it
// re-attaches), or when no agent answers.
func (r *sshRunner) runDurable(ctx context.Context, cmd Command) (Result, error) {
	if r.noAgents {
		return r.run(ctx, cmd)
	}
	res := Result{ExitCode: -1, Started: time.Now()}
	if err := checkIDs(cmd); err != nil {
		return res, err
	}
	ex, err := checkedExports(cmd)
	if err != nil {
		return res, err
	}
	rctx, cancel := runContext(ctx, cmd.Timeout)
	defer cancel()
	c := r.entry()
	if _, err := r.pool.client(rctx, c); err != nil {
		return res, err
	}
	res, err = r.runInAgent(rctx, c, cmd, ex)
	for try := 0; try < 2 && errors.Is(err, errAgentGone); try++ {
		cmd.BeforeStart = nil // called: the attempt is recorded
		res, err = r.runInAgent(rctx, c, cmd, ex)
	}
	if errors.Is(err, errClaimed) || errors.Is(err, errAgentGone) {
		cmd.BeforeStart, cmd.Timeout = nil, 0 // rctx bounds it
		return r.run(rctx, cmd)
	}
	return res, err
}

// sshText is what the host's shell runs for cmd, ex being its Env's
// exports: the secrets (read from stdin) before the environment and the
// script, or, for a durable command, the session supervisor around them.
func sshText(cmd Command, ex string) (string, error) {
	if cmd.Attempt != "" {
		if err := checkIDs(cmd); err != nil {
			return "", err
		}
		return superviseScript(supervisionOf(cmd, ex, true)), nil
	}
	text := ex + "exec /bin/sh -c " + shellQuote(cmd.Script)
	if len(cmd.Secrets) > 0 {
		text = readSecrets + text
	}
	return text, nil
}

func (r *sshRunner) run(ctx context.Context, cmd Command) (Result, error) {
	res := Result{ExitCode: -1, Started: time.Now()}
	ex, err := checkedExports(cmd)
	if err != nil {
		return res, err
	}
	rctx, cancel := runContext(ctx, cmd.Timeout)
	defer cancel()
	stdin := io.Reader(eofReader{})
	if cmd.Stdin != nil {
		stdin = cmd.Stdin
	}
	if len(cmd.Secrets) > 0 {
		stdin = io.MultiReader(strings.NewReader(secretLine(cmd.Secrets)), stdin)
	}
	text, err := sshText(cmd, ex)
	if err != nil {
		return res, err
	}
	as := cmd.as()
	remote := as.remote(text)
	if cmd.Attempt == "" {
		remote = "printf '" + pidMarker + "%s\\n' \"$$\"; " + text
		if as.on {
			remote = as.remote(remote)
		}
	}
	c := r.entry()
	var (
		sess   *ssh.Session
		client *ssh.Client
	)
	for {
		if err := r.acquire(rctx, c); err != nil { // stay within the sessions the connection allows
			return res, err
		}
		sess, client, err = r.prepare(rctx, c, cmd)
		if errors.Is(err, errOverLimit) {
			continue // the slot went to the connection: wait for another
		}
		if err != nil {
			c.touch()
			c.release()
			return res, err
		}
		break
	}
	defer func() { c.touch(); c.release() }()
	defer sess.Close()

	pgid := make(chan marked, 1)
	mask := newMasker(cmd.Secrets, cmd.Mask...)
	out := &output{stream: Stdout, onLine: cmd.OnLine, marker: pidMarker, onMarker: markerSink(pgid), mask: mask}
	errOut := &output{stream: Stderr, onLine: cmd.OnLine, mask: mask}
	sess.Stdout, sess.Stderr = out, errOut
	sess.Stdin = stdin
	if err := sess.Start(remote); err != nil {
		return res, fmt.Errorf("%w on %s: start: %w", ErrSession, r.address, err)
	}
	waited := make(chan error, 1)
	go func() { waited <- sess.Wait() }()
	var werr error
	select {
	case werr = <-waited:
	case <-rctx.Done():
		// The group id is the command's first output line; a cancel right
		// after the start may come before it, so wait for it a little.
		var g marked
		var kerr error
		select {
		case g = <-pgid:
			kerr = r.killRemote(client, g, as)
		case <-waited:
			waited <- nil // ended by itself meanwhile; nothing to kill
		case <-time.After(KillGrace):
			kerr = r.killRemote(client, g, as) // says the group is unknown
		}
		_ = sess.Close()
		select {
		case <-waited:
		case <-time.After(KillGrace):
		}
		out.flush()
		errOut.flush()
		res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
		return res, errors.Join(endErr(rctx), kerr)
	}
	out.flush()
	errOut.flush()
	res.Ended, res.Stdout, res.Stderr = time.Now(), out.String(), errOut.String()
	var ee *ssh.ExitError
	var missing *ssh.ExitMissingError
	switch {
	case werr == nil:
		res.ExitCode = 0
	case errors.As(werr, &ee):
		res.ExitCode = ee.ExitStatus()
		if ee.Signal() != "" {
			res.ExitCode = 128 + signalNumber(ee.Signal())
		}
		if cmd.Attempt != "" && res.ExitCode == lostExit {
			return res, fmt.Errorf("%w: %s on %s", ErrLost, cmd.Attempt, r.address)
		}
	case errors.As(werr, &missing), errors.Is(werr, io.EOF):
		r.pool.drop(c, client)
		return res, r.ended(c, client)
	default:
		return res, fmt.Errorf("%w on %s: %w", ErrSession, r.address, werr)
	}
	return res, nil
}

// killRemote ends the command's process group on the host (killScript),
// as the user the command runs as, and says whether that was confirmed.
// It uses a fresh session on the same connection (sshd ignores signal
// requests on sessions without a terminal).
func (r *sshRunner) killRemote(client *ssh.Client, m marked, as becomeAs) error {
	pgid := m.pgid
	if pgid <= 1 {
		return fmt.Errorf("%w: cannot kill the command on %s: its process group is unknown", ErrKill, r.address)
	}
	return r.remoteKill(client, as, killScript(pgid, m.dir), "process group "+strconv.Itoa(pgid))
}

// remoteKill runs a kill script on the host in a fresh session of client,
// as the user as, and says whether it confirmed (printed "gone") the end
// of what (the process group or attempt it kills).
func (r *sshRunner) remoteKill(client *ssh.Client, as becomeAs, script, what string) error {
	s, err := client.NewSession()
	if err != nil {
		return fmt.Errorf("%w: %s: %w", ErrKill, r.address, err)
	}
	defer s.Close()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	go func() {
		out, err := s.Output(as.remote(script))
		done <- result{out, err}
	}()
	select {
	case res := <-done:
		if strings.TrimSpace(string(res.out)) != "gone" {
			return fmt.Errorf("%w: %s on %s: %s %v", ErrKill, what, r.address, strings.TrimSpace(string(res.out)), res.err)
		}
		return nil
	case <-time.After(KillGrace + 10*time.Second):
		return fmt.Errorf("%w: %s on %s: no answer", ErrKill, what, r.address)
	}
}

type eofReader struct{}

func (eofReader) Read([]byte) (int, error) { return 0, io.EOF }

func signalNumber(sig string) int {
	switch sig {
	case "HUP":
		return 1
	case "INT":
		return 2
	case "KILL":
		return 9
	case "TERM":
		return 15
	}
	return 0
}
