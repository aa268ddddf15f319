package dag

import (
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
)

// Concurrency limits across executors: a host's max_parallel, the
// composition's limits (by labels or group), its priority, and the zone
// label that routes a host's work to the executors of its zone.

// Priority bounds: a composition's priority is 1-100; without one it is
// DefaultPriority. Work of a higher priority takes a free slot of a limit
// before work of a lower one waiting for it.
const (
	MinPriority     = 1
	MaxPriority     = 100
	DefaultPriority = 50
	// MaxLimit bounds a limit's max_parallel.
	MaxLimit = 100000
)

// ZoneLabel is the host label that routes a host's work to the executors
// started with the same zone (--labels zone=...).
const ZoneLabel = "zone"

// EffectivePriority is the composition's priority, or DefaultPriority.
func (c *Composition) EffectivePriority() int {
	if c.Priority == 0 {
		return DefaultPriority
	}
	return c.Priority
}

// Zone is the host's zone label ("" when it has none).
func (h Host) Zone() string { return h.Labels[ZoneLabel] }

// SlotLimit is one limit a node of a host takes a slot of while its attempt
// runs, across every executor: ID keys its slots (the same limit of two
// compositions is one limit), Name is how it is shown, and MaxParallel 0
// (a host's own limit only) means the executor's --per-host.
type SlotLimit struct {
	ID          string `json:"id"`
	Name        string `json:"name"`
	MaxParallel int    `json:"max_parallel"`
}

// HostLimits are the limits a node on the named host takes a slot of: the
// host's own, then every limit of the composition that matches the host,
// in a fixed order (by ID).
func (c *Composition) HostLimits(name string) []SlotLimit {
	h, ok := c.Hosts[name]
	if !ok {
		return nil
	}
	machine := "ssh\x00" + h.User + "@" + h.Address
	if h.Transport == TransportLocal {
		machine = "local\x00" + name
	}
	out := []SlotLimit{{ID: "h-" + limitHash(machine), Name: "host " + name, MaxParallel: h.MaxParallel}}
	for _, l := range c.Limits {
		if !c.limitMatches(l, name, h) {
			continue
		}
		id, shown := c.limitKey(l)
		if i := slices.IndexFunc(out, func(s SlotLimit) bool { return s.ID == id }); i >= 0 {
			out[i].MaxParallel = min(out[i].MaxParallel, l.MaxParallel) // the same limit twice: the smaller holds
			continue
		}
		out = append(out, SlotLimit{ID: id, Name: shown, MaxParallel: l.MaxParallel})
	}
	slices.SortFunc(out, func(a, b SlotLimit) int { return strings.Compare(a.ID, b.ID) })
	return out
}

// limitKey is a limit's ID and shown name. A group with labels is the
// same limit as those labels.
func (c *Composition) limitKey(l Limit) (string, string) {
	labels := l.Labels
	if l.Group != "" {
		g := c.Groups[l.Group]
		if len(g.Labels) == 0 {
			hs := slices.Clone(g.Hosts)
			slices.Sort(hs)
			return "g-" + limitHash("hosts\x00"+strings.Join(hs, "\x00")), "group " + l.Group
		}
		labels = g.Labels
	}
	keys := sortedKeys(labels)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + labels[k]
	}
	shown := strings.Join(parts, ",")
	if l.Group != "" {
		shown = "group " + l.Group + " (" + shown + ")"
	}
	return "l-" + limitHash("labels\x00"+strings.Join(parts, "\x00")), shown
}

func (c *Composition) limitMatches(l Limit, name string, h Host) bool {
	if l.Group != "" {
		g, ok := c.Groups[l.Group]
		if !ok {
			return false
		}
		if len(g.Labels) == 0 {
			return slices.Contains(g.Hosts, name)
		}
		return labelsInclude(h.Labels, g.Labels)
	}
	return len(l.Labels) > 0 && labelsInclude(h.Labels, l.Labels)
}

func labelsInclude(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

func limitHash(s string) string {
	sum := sha256.Sum256([]byte(s))
	return hex.EncodeToString(sum[:8])
}

// limits checks the hosts' max_parallel and zone, the composition's
// limits and its priority.
func (v *validator) limits() {
	c := v.c
	for _, name := range sortedKeys(c.Hosts) {
		h := c.Hosts[name]
		p := keyPath("hosts", name)
		if h.MaxParallel < 0 || h.MaxParallel > MaxMaxParallel {
			v.bad(p+".max_parallel", CodeValue, "max_parallel %d is out of range 1-%d (leave it out for the executor's --per-host)", h.MaxParallel, MaxMaxParallel)
		}
		if z, ok := h.Labels[ZoneLabel]; ok && !IsToken(z) {
			v.bad(keyPath(p+".labels", ZoneLabel), CodeToken, "zone %s (it routes the host's work to the executors of its zone)", tokenProblem(z))
		}
	}
	if c.Priority != 0 && (c.Priority < MinPriority || c.Priority > MaxPriority) {
		v.bad("priority", CodeValue, "priority %d is out of range %d-%d (default %d)", c.Priority, MinPriority, MaxPriority, DefaultPriority)
	}
	for i, l := range c.Limits {
		p := indexPath("limits", i)
		if l.MaxParallel < 1 || l.MaxParallel > MaxLimit {
			v.bad(p+".max_parallel", CodeValue, "max_parallel %d is out of range 1-%d", l.MaxParallel, MaxLimit)
		}
		switch {
		case l.Group != "" && len(l.Labels) > 0:
			v.bad(p, CodeValue, "a limit has labels or a group, not both")
		case l.Group != "":
			if _, ok := c.Groups[l.Group]; !ok {
				v.bad(p+".group", CodeUnknownRef, "unknown group %q", l.Group)
			}
		case len(l.Labels) == 0:
			v.bad(p, CodeRequired, "a limit needs labels (hosts with all of them) or a group")
		}
	}
}

// priority reads a composition's priority: 0 is not one (leave it out for
// the default).
func (d *decoder) priority(dst *int) func(*Value, string) {
	return func(v *Value, p string) {
		d.integer(dst)(v, p)
		if *dst == 0 && v.Kind == KindNumber && !d.ps.bad[p] {
			d.ps.add(p, v.Line, CodeValue, "priority must be %d-%d (leave it out for the default %d)", MinPriority, MaxPriority, DefaultPriority)
		}
	}
}
