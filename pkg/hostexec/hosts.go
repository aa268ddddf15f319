package hostexec

import (
	"fmt"
	"sync"
)

// Hosts hands out runners by transport. The SSH pool is made on first use,
// so a run that only uses transport local needs no SSH key or known_hosts.
// A failed set-up (key unreadable, known_hosts missing) is tried again at
// the next use, so fixing it needs no restart.
type Hosts struct {
	cfg  SSHConfig
	mu   sync.Mutex
	pool *Pool
}

// NewHosts returns a factory using cfg for SSH.
func NewHosts(cfg SSHConfig) *Hosts { return &Hosts{cfg: cfg} }

// Runner returns the runner for a host: "local", or "ssh" at address.
func (h *Hosts) Runner(transport, address, user string) (Runner, error) {
	switch transport {
	case "local":
		return Local{}, nil
	case "ssh", "":
		p, err := h.sshPool()
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConnect, err)
		}
		return p.Runner(address, user), nil
	}
	return nil, fmt.Errorf("unknown transport %q", transport)
}

func (h *Hosts) sshPool() (*Pool, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pool == nil {
		p, err := NewPool(h.cfg)
		if err != nil {
			return nil, err
		}
		h.pool = p
	}
	return h.pool, nil
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
