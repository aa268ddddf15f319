package engine

import (
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// hostVia is the jump hosts a server is reached through, the first hop
// first, each with its address (host:port, as the normalized composition
// has it) and user; nil without via.
func hostVia(c *dag.Composition, server string) []events.Jump {
	chain := dag.ViaChain(c, server)
	if len(chain) == 0 {
		return nil
	}
	out := make([]events.Jump, len(chain))
	for i, name := range chain {
		j := c.Hosts[name]
		out[i] = events.Jump{Address: j.Address, User: j.User, IdentityFile: j.IdentityFile}
	}
	return out
}
