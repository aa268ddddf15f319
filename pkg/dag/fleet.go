package dag

import (
	"slices"
	"strings"
)

// Fleets. Hosts carry labels and vars; groups select hosts by label or by
// name; a formula with `group` instead of `server` fans out into one
// instance per host of the group, named "<formula>-<host token>" (InstanceID), each a formula
// of its own. Every command (run, check, delete, a gate's check, plain env
// values) is a Go text/template over the host it runs on, rendered when
// the composition is loaded, so plans, spec hashes and records hold the
// commands as they run. A rollout runs a fanned-out formula's instances in
// batches, each batch waiting for the previous one to finish and pass its
// gates (ConditionRollout).

// ConditionRollout is the condition of an instance on each instance of the
// previous batch of its rollout: met when that instance has finished and
// passed its gate, or failed within the rollout's max_failed. It is made
// by expansion; compositions cannot use it.
const ConditionRollout Condition = "rollout"

// fleet checks groups and the fleet fields of formulas.
func (v *validator) fleet() {
	c := v.c
	for _, name := range sortedKeys(c.Groups) {
		p := keyPath("groups", name)
		v.token(p, name, "group name")
		g := c.Groups[name]
		switch {
		case len(g.Labels) > 0 && len(g.Hosts) > 0:
			v.bad(p, CodeValue, "group %q: give labels or hosts, not both", name)
		case len(g.Labels) == 0 && len(g.Hosts) == 0:
			v.bad(p, CodeRequired, "group %q needs labels or hosts", name)
		case len(g.Hosts) > 0:
			for i, h := range g.Hosts {
				if _, ok := c.Hosts[h]; !ok {
					v.bad(indexPath(p+".hosts", i), CodeUnknownRef, "host %q is not listed in hosts", h)
				}
			}
		default:
			if len(groupHosts(c, g)) == 0 {
				v.bad(p+".labels", CodeValue, "group %q: no host has the labels %s", name, labelText(g.Labels))
			}
		}
	}
}

// formulaFleet checks a formula's server or group, and its rollout.
func (v *validator) formulaFleet(p string, f *Formula) {
	switch {
	case f.Instance != nil:
		// made by expansion: checked as it was made
	case f.Group != "" && f.Server != "":
		v.bad(p+".group", CodeValue, "give server or group, not both")
	case f.Group != "":
		if _, ok := v.c.Groups[f.Group]; !ok {
			v.bad(p+".group", CodeUnknownRef, "group %q is not listed in groups", f.Group)
		}
	}
	if r := f.Rollout; r != nil {
		if f.Group == "" {
			v.bad(p+".rollout", CodeValue, "rollout needs group: it runs a group's instances in batches")
		}
		if r.Batch.N < 1 || r.Batch.Percent && r.Batch.N > 100 {
			v.bad(p+".rollout.batch", CodeValue, "batch must be at least 1 (a number of instances or a percentage 1%%-100%%), got %s", r.Batch)
		}
		if r.MaxFailed.N < 0 || r.MaxFailed.Percent && r.MaxFailed.N > 100 {
			v.bad(p+".rollout.max_failed", CodeValue, "max_failed must be 0 or more (a number of instances or a percentage up to 100%%), got %s", r.MaxFailed)
		}
	}
}

func labelText(l map[string]string) string {
	parts := make([]string, 0, len(l))
	for _, k := range sortedKeys(l) {
		parts = append(parts, k+"="+l[k])
	}
	return strings.Join(parts, ",")
}

// groupHosts lists a group's hosts, sorted by name.
func groupHosts(c *Composition, g Group) []string {
	if len(g.Hosts) > 0 {
		out := slices.Clone(g.Hosts)
		slices.Sort(out)
		return slices.Compact(out)
	}
	var out []string
	for _, name := range sortedKeys(c.Hosts) {
		if matches(c.Hosts[name].Labels, g.Labels) {
			out = append(out, name)
		}
	}
	return out
}

// matches reports whether labels include every one of want.
func matches(labels, want map[string]string) bool {
	for k, v := range want {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// expand fans out every group formula and renders every template, in
// place. Problems are reported with the path of the formula as written
// and the host they concern.
func expand(c *Composition, ps *problems) {
	hostsOf := groupHostsOnce(c)
	nodes, env := expandedSize(c, hostsOf)
	if nodes > MaxExpandedNodes {
		ps.add("formulas", 0, CodeTooLarge, "the groups fan out into %d nodes, more than %d: split the composition", nodes, MaxExpandedNodes)
		return
	}
	if env > MaxExpandedEnv {
		ps.add("formulas", 0, CodeTooLarge, "the groups fan out into %d env values, more than %d: split the composition", env, MaxExpandedEnv)
		return
	}
	instances := make(map[string][]string) // group formula id -> instance ids
	var out []Formula
	var at []string // each formula's path as written
	rd := newRenderer(c)
	for i := range c.Formulas {
		f := c.Formulas[i]
		p := indexPath("formulas", i)
		if f.Group == "" {
			renderFormula(c, &f, p, rd, ps)
			out = append(out, f)
			at = append(at, p)
			continue
		}
		made := fanOut(c, f, p, hostsOf(f.Group), rd, ps)
		for _, m := range made {
			instances[f.ID] = append(instances[f.ID], m.ID)
			at = append(at, p)
		}
		out = append(out, made...)
	}
	checkFiles(&Composition{Formulas: out}, at, ps)
	if len(instances) == 0 {
		c.Formulas = out
		return
	}
	ids := make(map[string]string, len(out)) // instance id -> its path, to find clashes
	for i, f := range out {
		if first, dup := ids[f.ID]; dup {
			ps.add(first, 0, CodeDuplicate, "formula id %q is made twice (an instance of a group formula is named <formula>-<host token>; rename one)", f.ID)
		}
		ids[f.ID] = indexPath("formulas", i)
		out[i].DependsOn = expandDeps(f.DependsOn, instances)
	}
	c.Targets = expandTargets(c.Targets, instances)
	c.Rerun = expandRerun(c.Rerun, instances)
	c.Formulas = out
}

// MaxExpandedNodes bounds the nodes a composition fans out into: a small
// document naming large groups must not make a plan no one can run.
const MaxExpandedNodes = 200_000

// MaxExpandedEnv bounds the env values (each node's and gate's, on each
// host) a composition fans out into: each instance has its own.
const MaxExpandedEnv = 2_000_000

// expandedSize is how many nodes and env values c fans out into.
func expandedSize(c *Composition, hostsOf func(string) []string) (nodes, env int) {
	for _, f := range c.Formulas {
		k := 1
		if f.Group != "" {
			k = len(hostsOf(f.Group))
		}
		nodes += k * len(f.Nodes)
		for _, n := range f.Nodes {
			env += k * len(n.Env)
		}
		if f.HealthGate != nil {
			env += k * len(f.HealthGate.Env)
		}
	}
	return nodes, env
}

// groupHostsOnce is groupHosts of c, each group's listed and sorted once.
func groupHostsOnce(c *Composition) func(group string) []string {
	seen := map[string][]string{}
	return func(group string) []string {
		hosts, ok := seen[group]
		if !ok {
			hosts = groupHosts(c, c.Groups[group])
			seen[group] = hosts
		}
		return hosts
	}
}

// fanOut makes the instances of group formula f, in batches.
func fanOut(c *Composition, f Formula, p string, hosts []string, rd *renderer, ps *problems) []Formula {
	size, maxFailed := len(hosts), 0
	if r := f.Rollout; r != nil {
		size, maxFailed = max(r.Batch.Of(len(hosts)), 1), r.MaxFailed.Floor(len(hosts))
	}
	batches := (len(hosts) + size - 1) / size
	made := make([]Formula, 0, len(hosts))
	for k, h := range hosts {
		m := f
		m.ID, m.Server, m.Group, m.Rollout = InstanceID(f.ID, h), h, "", nil
		if !IsToken(m.ID) {
			ps.add(p+".id", 0, CodeToken, "instance %q of formula %q on host %q: %s", m.ID, f.ID, h, tokenProblem(m.ID))
		}
		m.Instance = &Instance{Of: f.ID}
		if f.Rollout != nil {
			m.Instance.Batch, m.Instance.Batches, m.Instance.MaxFailed = k/size+1, batches, maxFailed
			if b := k / size; b > 0 {
				for _, prev := range hosts[(b-1)*size : b*size] {
					m.DependsOn = append(slices.Clip(m.DependsOn), FormulaDep{Formula: InstanceID(f.ID, prev), Condition: ConditionRollout})
				}
			}
		}
		m.Nodes = slices.Clone(f.Nodes)
		if f.HealthGate != nil {
			g := *f.HealthGate
			m.HealthGate = &g
		}
		renderFormula(c, &m, p, rd, ps)
		made = append(made, m)
	}
	return made
}

// expandDeps turns a dependency on a group formula into dependencies on
// each of its instances, with the same condition.
func expandDeps(deps []FormulaDep, instances map[string][]string) []FormulaDep {
	var out []FormulaDep
	for _, d := range deps {
		ids, ok := instances[d.Formula]
		if !ok {
			out = append(out, d)
			continue
		}
		for _, id := range ids {
			out = append(out, FormulaDep{Formula: id, Condition: d.Condition})
		}
	}
	return out
}

func expandTargets(targets []string, instances map[string][]string) []string {
	var out []string
	for _, t := range targets {
		if ids, ok := instances[t]; ok {
			out = append(out, ids...)
			continue
		}
		out = append(out, t)
	}
	return out
}

// expandRerun puts each instance of a group formula in place of the
// formula's name in rerun references ("formula/node").
func expandRerun(refs []string, instances map[string][]string) []string {
	var out []string
	for _, r := range refs {
		f, n, _ := strings.Cut(r, "/")
		if ids, ok := instances[f]; ok {
			for _, id := range ids {
				out = append(out, id+"/"+n)
			}
			continue
		}
		out = append(out, r)
	}
	return out
}

// renderFormula renders every template of a formula for its server.
func renderFormula(c *Composition, f *Formula, p string, rd *renderer, ps *problems) {
	h, ok := c.Hosts[f.Server]
	if !ok {
		return // reported by validation
	}
	data, err := rd.data(c, f.Server, h)
	if err != nil {
		rd.report(ps, p, f, err)
		return
	}
	rd.outputs.f = f
	r := func(s *string, path string) bool {
		out, err := rd.t.Render(*s, data)
		if err == nil {
			*s = out
			return true
		}
		rd.report(ps, path, f, err)
		return false
	}
	for j := range f.Nodes {
		n := &f.Nodes[j]
		np := indexPath(p+".nodes", j)
		r(&n.Run, np+".run")
		r(&n.Check, np+".check")
		r(&n.Delete, np+".delete")
		n.Env = renderEnv(n.Env, np+".env", r, ps)
		renderFiles(n, np, r, ps)
	}
	if g := f.HealthGate; g != nil {
		r(&g.Check, p+".health_gate.check")
		g.Env = renderEnv(g.Env, p+".health_gate.env", r, ps)
	}
}

// renderEnv renders env values and secret names (never a secret's value:
// the planner does not know it) into a new map: instances share their
// formula's maps otherwise.
func renderEnv(env map[string]EnvValue, p string, r func(*string, string) bool, ps *problems) map[string]EnvValue {
	if env == nil {
		return nil
	}
	out := make(map[string]EnvValue, len(env))
	for k, v := range env {
		if !v.IsSecret() {
			r(&v.Text, keyPath(p, k))
		} else if r(&v.Secret, keyPath(p, k)+".secret") {
			// a secret's name may be a template ("db_{{ .Host }}")
			if prob := SecretNameProblem(v.Secret); prob != "" {
				ps.add(keyPath(p, k)+".secret", 0, CodeValue, "%s", prob)
			}
		}
		out[k] = v
	}
	return out
}
