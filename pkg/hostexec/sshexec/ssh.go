// Package sshexec is the SSH runner of hostexec: a Pool of connections
// (one per user@host, reused, and one per jump host shared by the hosts
// behind it), host keys checked against known_hosts on every hop, keys,
// the ssh-agent and certificates, host agents for durable attempts, and
// sudo (Command.Become).
package sshexec

import (
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/user"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"golang.org/x/crypto/ssh"
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
	// UseAgent also offers the keys of the ssh-agent at AgentSocket,
	// after the key file's, in the same publickey attempt.
	UseAgent bool
	// AgentSocket is the ssh-agent's socket: $SSH_AUTH_SOCK of the
	// worker, which the service's main reads (ReadEnv); "": no agent.
	AgentSocket string
	// Home is the worker's home directory, for the default key and
	// known_hosts (~/.ssh) and identity files under ~: $HOME of the
	// worker (ReadEnv); "": its user's, from the user database.
	Home string
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

// AgentSocketEnv is the variable that names the ssh-agent's socket.
const AgentSocketEnv = "SSH_AUTH_SOCK"

// ReadEnv sets what the settings take from the worker's environment
// rather than from a flag: the ssh-agent's socket and the home directory.
func (c *SSHConfig) ReadEnv(lookup func(string) (string, bool)) {
	c.AgentSocket, _ = lookup(AgentSocketEnv)
	c.Home, _ = lookup("HOME")
}

// home is the worker's home directory: Home, else its user's ("": none).
func (c SSHConfig) home() string {
	if c.Home != "" {
		return c.Home
	}
	if u, err := user.Current(); err == nil {
		return u.HomeDir
	}
	return ""
}

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

// DefaultSSHPaths returns the key file and known_hosts OpenSSH would use
// in the home directory home ("": none).
func DefaultSSHPaths(home string) (keyFile, knownHosts string) {
	if home == "" {
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
	agentSock string       // cfg.AgentSocket when the agent is used
	home      string       // the worker's home directory, for identity files under ~
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
		return fmt.Errorf("%w on %s: %w: %w", hostexec.ErrSession, r.address, why, errConnectionEnded)
	}
	return fmt.Errorf("%w on %s: %w", hostexec.ErrSession, r.address, errConnectionEnded)
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
	home := cfg.home()
	defKey, defKnown := DefaultSSHPaths(home)
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
	p := &Pool{cfg: cfg, home: home, log: cfg.Logger, conns: map[string]*conn{}, dials: map[*dialing]struct{}{}, stop: make(chan struct{}), draining: make(chan struct{})}
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
		p.agentSock = cfg.AgentSocket
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
func (p *Pool) Runner(address, user string, via ...Jump) hostexec.AttemptRunner {
	return p.HostRunner(Jump{Address: address, User: user}, via...)
}

// HostRunner returns a runner for the host h, reached through the jump
// hosts via, the first hop first, each with its user and identity file.
func (p *Pool) HostRunner(h Jump, via ...Jump) hostexec.AttemptRunner {
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
	return fmt.Errorf("%w: the command on %s was not started", hostexec.ErrDraining, r.address)
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
