package hostexec

import (
	"fmt"
	"sync"
)

// Hosts hands out runners by transport. The SSH pool is made on first use,
// so a run that only uses transport local needs no SSH key or known_hosts.
type Hosts struct {
	cfg  SSHConfig
	once sync.Once
	pool *Pool
	err  error
}

// NewHosts returns a factory using cfg for SSH.
func NewHosts(cfg SSHConfig) *Hosts { return &Hosts{cfg: cfg} }

// Runner returns the runner for a host: "local", or "ssh" at address.
func (h *Hosts) Runner(transport, address, user string) (Runner, error) {
	switch transport {
	case "local":
		return Local{}, nil
	case "ssh", "":
		h.once.Do(func() { h.pool, h.err = NewPool(h.cfg) })
		if h.err != nil {
			return nil, fmt.Errorf("%w: %w", ErrConnect, h.err)
		}
		return h.pool.Runner(address, user), nil
	}
	return nil, fmt.Errorf("unknown transport %q", transport)
}

// Close closes the SSH connections.
func (h *Hosts) Close() {
	if h.pool != nil {
		h.pool.Close()
	}
}
