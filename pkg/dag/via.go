package dag

import (
	"slices"
	"strings"
)

// MaxViaDepth is the most jump hosts a host may be reached through.
const MaxViaDepth = 8

// via checks a host's `via`: the jump host is listed in hosts and reached
// over ssh, a host of transport local has none, the chain of jump hosts
// has no cycle and is at most MaxViaDepth long. p is the host's path.
func (v *validator) via(p, name string, h Host) {
	if h.Via == "" {
		return
	}
	vp := p + ".via"
	if h.Transport == TransportLocal {
		v.bad(vp, CodeValue, "host %q has transport local, which cannot have via: only ssh hosts are reached through a jump host", name)
		return
	}
	if h.Via == name {
		v.bad(vp, CodeCycle, "host %q is reached via itself", name)
		return
	}
	j, ok := v.c.Hosts[h.Via]
	if !ok {
		v.bad(vp, CodeUnknownRef, "via %q is not listed in hosts", h.Via)
		return
	}
	if j.Transport != "" && j.Transport != TransportSSH {
		v.bad(vp, CodeValue, "via %q has transport %s: a jump host must be reached over ssh", h.Via, j.Transport)
		return
	}
	chain, cycle := viaWalk(v.c, name)
	if cycle {
		// Each cycle once, at the host of the cycle whose name sorts first.
		// chain ends with the host the walk came back to.
		back := chain[len(chain)-1]
		if back != name {
			return // name leads into a cycle; its members report it
		}
		if slices.Min(chain) != name { // chain holds every member
			return
		}
		v.bad(vp, CodeCycle, "via cycle between hosts: %s", strings.Join(append([]string{name}, chain...), " -> "))
		return
	}
	if len(chain) > MaxViaDepth {
		v.bad(vp, CodeValue, "host %q is reached through %d jump hosts (%s); at most %d", name, len(chain), strings.Join(append([]string{name}, chain...), " -> "), MaxViaDepth)
	}
}

// viaWalk follows via from host: the hosts it passes, nearest first (the
// host's own via first), and whether it came back to a host already
// passed (then the last one named is that host). It stops at a host with
// no via or one not listed.
func viaWalk(c *Composition, host string) (chain []string, cycle bool) {
	seen := map[string]bool{host: true}
	for cur := c.Hosts[host].Via; cur != ""; {
		chain = append(chain, cur)
		if seen[cur] {
			return chain, true
		}
		seen[cur] = true
		next, ok := c.Hosts[cur]
		if !ok {
			chain = chain[:len(chain)-1]
			break
		}
		cur = next.Via
	}
	return chain, false
}

// ViaChain is the jump hosts a host is reached through, from the first
// hop (the one dialed directly) to the last (the one that reaches host);
// nil when it has no via. On a composition Validate rejected for its via,
// the chain stops before a host met twice or not listed.
func ViaChain(c *Composition, host string) []string {
	chain, cycle := viaWalk(c, host)
	if cycle {
		chain = chain[:len(chain)-1]
	}
	if len(chain) == 0 {
		return nil
	}
	slices.Reverse(chain)
	return chain
}
