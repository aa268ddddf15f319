// Package transport is the factory of host runners: the runner of a
// host by its transport (ssh through a shared pool of connections, local
// on this machine only where the worker allows it).
package transport

import (
	"errors"
	"flag"
	"fmt"
	"sync"

	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
)

// ErrLocalNotAllowed: a host has transport local, and this worker was not
// started to run commands on its own machine.
var ErrLocalNotAllowed = errors.New("transport local is not allowed on this worker")

// HostsConfig configures a Hosts.
type HostsConfig struct {
	SSH sshexec.SSHConfig
	// AllowLocal lets hosts with transport local run: their commands run
	// on the worker's own machine as the worker's own user. Off unless the
	// operator turns it on.
	AllowLocal bool
	// Worker is what the commands of hosts with transport local keep of
	// the worker's environment.
	Worker localexec.WorkerEnv
}

// ReadEnv sets what the settings take from the worker's environment
// (lookup: os.LookupEnv in a process): the ssh-agent's socket, and what
// local commands keep of it.
func (c *HostsConfig) ReadEnv(lookup func(string) (string, bool)) {
	c.SSH.ReadEnv(lookup)
	c.Worker = localexec.WorkerEnvOf(lookup)
}

// RegisterFlags adds the SSH flags and --allow-local (its variable is
// GANTRY_ALLOW_LOCAL).
func (c *HostsConfig) RegisterFlags(fs *flag.FlagSet) {
	c.SSH.RegisterFlags(fs)
	fs.BoolVar(&c.AllowLocal, "allow-local", false, "run hosts with transport local: commands on this machine as this process's user")
}

// Hosts hands out runners by transport. The SSH pool is made on first use,
// so a run that only uses transport local needs no SSH key or known_hosts.
// A failed set-up (key unreadable, known_hosts missing) is tried again at
// the next use, so fixing it needs no restart.
type Hosts struct {
	cfg     HostsConfig
	local   localexec.Local
	mu      sync.Mutex
	pool    *sshexec.Pool
	drained bool // Drain was called: a pool made later drains at once
}

// NewHosts returns a factory using cfg.
func NewHosts(cfg HostsConfig) *Hosts {
	return &Hosts{cfg: cfg, local: localexec.Local{Worker: cfg.Worker}}
}

// Target is a host to run commands on: "local" (Address, User,
// IdentityFile and Via unused), or "ssh" at Address as User (the default
// user when empty), offered the key IdentityFile (a path on this worker;
// the worker's key when empty), reached through the jump hosts Via, the
// first hop first.
type Target struct {
	Transport    string
	Address      string
	User         string
	IdentityFile string
	Via          []sshexec.Jump
}

// Runner returns the runner for a host, of plain commands and durable
// attempts: "local" (when allowed), or "ssh" at its address, through its
// jump hosts.
func (h *Hosts) Runner(t Target) (hostexec.AttemptRunner, error) {
	switch t.Transport {
	case "local":
		if !h.cfg.AllowLocal {
			return nil, fmt.Errorf("%w: start it with --allow-local or GANTRY_ALLOW_LOCAL=1 (local commands run as the worker's own user on its machine)", ErrLocalNotAllowed)
		}
		if len(t.Via) > 0 {
			return nil, errors.New("transport local is never reached through a jump host (via)")
		}
		return h.local, nil
	case "ssh", "":
		p, err := h.sshPool()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", hostexec.ErrConnect, err)
		}
		return p.HostRunner(sshexec.Jump{Address: t.Address, User: t.User, IdentityFile: t.IdentityFile}, t.Via...), nil
	}
	return nil, fmt.Errorf("unknown transport %q", t.Transport)
}

func (h *Hosts) sshPool() (*sshexec.Pool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pool == nil {
		p, err := sshexec.NewPool(h.cfg.SSH)
		if err != nil {
			return nil, err
		}
		if h.drained {
			p.Drain()
		}
		h.pool = p
	}
	return h.pool, nil
}

// Drain stops new SSH commands from starting (sshexec.Pool.Drain): a worker that
// is stopping calls it, so that what waits for a connection, a session
// slot or a session sshd refuses ends at once, with nothing started, while
// the commands that started run on to their end. Local commands are not
// affected: they never wait for a slot here.
func (h *Hosts) Drain() {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.drained = true
	if h.pool != nil {
		h.pool.Drain()
	}
}

// Close closes the SSH connections.
func (h *Hosts) Close() {
	h.mu.Lock()
	p := h.pool
	h.mu.Unlock()
	if p != nil {
		p.Close()
	}
}
