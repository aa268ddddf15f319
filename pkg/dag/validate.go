package dag

import (
	"fmt"
	"net"
	"slices"
	"strconv"
	"strings"
)

// MaxTokenLen is the longest name allowed for a composition, host, formula
// or node: names become NATS subject tokens.
const MaxTokenLen = 63

// IsToken reports whether s matches [a-z0-9][a-z0-9_-]{0,62}.
func IsToken(s string) bool {
	if len(s) == 0 || len(s) > MaxTokenLen {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c >= 'a' && c <= 'z', c >= '0' && c <= '9':
		case (c == '-' || c == '_') && i > 0:
		default:
			return false
		}
	}
	return true
}

func tokenProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxTokenLen:
		return fmt.Sprintf("%q is %d characters; names are at most %d", trunc(s, 20), len(s), MaxTokenLen)
	}
	const rule = "names match [a-z0-9][a-z0-9_-]{0,62}"
	if i := strings.IndexAny(s, ". *>"); i >= 0 {
		return fmt.Sprintf("%q contains %q, which would break NATS subjects; %s", s, s[i], rule)
	}
	for _, r := range s {
		if r > 127 {
			return fmt.Sprintf("%q contains non-ASCII %q; %s", s, r, rule)
		}
	}
	if i := strings.IndexFunc(s, func(r rune) bool { return r >= 'A' && r <= 'Z' }); i >= 0 {
		return fmt.Sprintf("%q contains upper-case %q; %s", s, s[i], rule)
	}
	if s[0] == '-' || s[0] == '_' {
		return fmt.Sprintf("%q starts with %q; names start with a letter or digit", s, s[0])
	}
	return fmt.Sprintf("%q is not a name: names match [a-z0-9][a-z0-9_-]{0,62}", s)
}

func trunc(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "..."
}

// Validate reports every problem with a decoded composition at once, as an
// *InvalidError, or nil. It does not modify c.
func Validate(c *Composition) error {
	var ps problems
	validate(c, &ps)
	return ps.err()
}

// validate checks c and returns the dependencies its output reads make
// (see linkOutputs).
func validate(c *Composition, ps *problems) []outputLink {
	v := validator{c: c, ps: ps}
	v.run()
	return v.links
}

type validator struct {
	c  *Composition
	ps *problems
	// hostsOf lists a group's hosts, each group once (nil: not yet made)
	hostsOf func(group string) []string
	// links are the dependencies output reads make, and edges the same
	// for the cycle checks (outputs.go).
	links []outputLink
	edges outputEdges
}

func (v *validator) bad(path string, code Code, format string, args ...any) {
	v.ps.addUnlessCovered(path, 0, code, format, args...)
}

func (v *validator) token(path, s, what string) bool {
	if IsToken(s) {
		return true
	}
	if s == "" {
		v.bad(path, CodeRequired, "%s is required", what)
	} else {
		v.bad(path, CodeToken, "%s %s", what, tokenProblem(s))
	}
	return false
}

func (v *validator) run() {
	c := v.c
	v.token("name", c.Name, "name")
	v.inventory()
	switch c.Operation {
	case "", OpCreate, OpDelete, OpCheck:
	default:
		v.bad("operation", CodeValue, "unknown operation %q: use create, delete or check", c.Operation)
	}
	switch c.OnFailure {
	case "", OnFailureStop, OnFailureContinue, OnFailureRollback:
	default:
		v.bad("on_failure", CodeValue, "unknown on_failure %q: use stop, continue or rollback", c.OnFailure)
	}
	if c.Retry != nil {
		v.retry("retry", c.Retry)
	}
	if c.Timeout < 0 {
		v.bad("timeout", CodeValue, "timeout must be greater than 0 (leave it out for none)")
	}
	if c.Diff && c.Operation != OpCheck {
		v.bad("diff", CodeValue, "diff shows what operation check would change: it needs operation: check")
	}
	for _, name := range sortedKeys(c.Hosts) {
		v.host(keyPath("hosts", name), name, c.Hosts[name])
	}
	v.hostTokens() // host.go
	v.fleet()
	v.limits() // limits.go
	if len(c.Formulas) == 0 {
		v.bad("formulas", CodeRequired, "at least one formula is required")
		return
	}
	ids := make(map[string]int, len(c.Formulas))
	for i := range c.Formulas {
		f := &c.Formulas[i]
		p := indexPath("formulas", i)
		if v.token(p+".id", f.ID, "id") {
			if first, dup := ids[f.ID]; dup {
				v.bad(p+".id", CodeDuplicate, "duplicate formula id %q (also formulas[%d])", f.ID, first)
			} else {
				ids[f.ID] = i
			}
		}
	}
	v.links = v.outputReads(ids)
	v.edges = newOutputEdges(c, v.links)
	for i := range c.Formulas {
		v.formula(indexPath("formulas", i), &c.Formulas[i], ids)
	}
	v.formulaCycles(ids)
	v.targets(ids)
	v.rerun(ids)
}

func (v *validator) host(p, name string, h Host) {
	v.hostName(p, name)
	switch h.Transport {
	case "", TransportSSH:
		if h.Address == "" {
			v.bad(p+".address", CodeRequired, "address is required for transport ssh (or set transport: local)")
		} else if _, err := hostAddress(h.Address); err != nil {
			v.bad(p+".address", CodeValue, "%v", err)
		}
	case TransportLocal:
	default:
		v.bad(p+".transport", CodeValue, "unknown transport %q: use ssh or local", h.Transport)
	}
	if strings.ContainsAny(h.User, " \t\r\n@:") {
		v.bad(p+".user", CodeValue, "user %q contains a space, '@' or ':'", h.User)
	}
	v.hostBecome(p, h)
	v.via(p, name, h)
}

// hostAddress checks an address and returns it as host:port, adding port 22.
func hostAddress(a string) (string, error) {
	host, port, err := net.SplitHostPort(a)
	if err != nil {
		// No port: a bare host name or IP address.
		if strings.Contains(a, ":") && net.ParseIP(strings.Trim(a, "[]")) == nil {
			return "", fmt.Errorf("address %q is not host or host:port", a)
		}
		host, port = strings.Trim(a, "[]"), DefaultSSHPort
	}
	if host == "" || strings.ContainsAny(host, " \t\r\n/@") {
		return "", fmt.Errorf("address %q has no valid host", a)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", fmt.Errorf("address %q has a bad port %q (1-65535)", a, port)
	}
	return net.JoinHostPort(host, port), nil
}

func (v *validator) formula(p string, f *Formula, ids map[string]int) {
	switch {
	case f.Group != "":
	case f.Server == "":
		v.bad(p+".server", CodeRequired, "server is required (or group, to run it on each host of a group)")
	default:
		if _, ok := v.c.Hosts[f.Server]; !ok {
			v.bad(p+".server", CodeUnknownRef, "server %q is not listed in hosts", f.Server)
		}
	}
	v.formulaFleet(p, f)
	v.formulaBecome(p, f)
	if f.MaxParallel < 0 || f.MaxParallel > MaxMaxParallel {
		v.bad(p+".max_parallel", CodeValue, "max_parallel %d is out of range 1-%d", f.MaxParallel, MaxMaxParallel)
	}
	if f.Timeout < 0 {
		v.bad(p+".timeout", CodeValue, "timeout must be greater than 0 (leave it out for none)")
	}
	seen := make(map[string]bool, len(f.DependsOn))
	for j, d := range f.DependsOn {
		dp := indexPath(p+".depends_on", j)
		switch {
		case d.Formula == "":
			v.bad(dp+".formula", CodeRequired, "formula is required")
		case d.Formula == f.ID:
			v.bad(dp, CodeCycle, "formula %q depends on itself", f.ID)
		default:
			k, ok := ids[d.Formula]
			if !ok {
				v.bad(dp, CodeUnknownRef, "unknown formula %q", d.Formula)
				break
			}
			if seen[d.Formula] {
				v.bad(dp, CodeDuplicate, "formula %q is listed twice", d.Formula)
			}
			seen[d.Formula] = true
			if d.Condition == ConditionHealthy && v.c.Formulas[k].HealthGate == nil {
				v.bad(dp+".condition", CodeValue, "condition healthy, but formula %q has no health_gate", d.Formula)
			}
		}
		switch {
		case d.Condition == "", d.Condition == ConditionCompleted, d.Condition == ConditionHealthy:
		case d.Condition == ConditionRollout && f.Instance != nil:
		default:
			v.bad(dp+".condition", CodeValue, "unknown condition %q: use completed or healthy", d.Condition)
		}
	}
	if g := f.HealthGate; g != nil {
		gp := p + ".health_gate"
		v.env(gp+".env", g.Env)
		if strings.TrimSpace(g.Check) == "" {
			v.bad(gp+".check", CodeRequired, "health_gate needs a check command")
		}
		if why := ScriptTooLarge(ScriptArgSize(g.Check)); why != "" {
			v.bad(gp+".check", CodeTooLarge, "%s", why)
		}
		if g.Timeout <= 0 {
			v.bad(gp+".timeout", CodeRequired, "health_gate needs a timeout greater than 0")
		}
		if g.Retries < 1 || g.Retries > MaxRetryAttempts {
			v.bad(gp+".retries", CodeRequired, "health_gate needs retries between 1 and %d", MaxRetryAttempts)
		}
	}
	if len(f.Nodes) == 0 {
		v.bad(p+".nodes", CodeRequired, "formula %q has no nodes", f.ID)
		return
	}
	names := make(map[string]int, len(f.Nodes))
	for j := range f.Nodes {
		n := &f.Nodes[j]
		if !IsToken(n.Name) {
			v.token(indexPath(p+".nodes", j)+".name", n.Name, "name")
			continue
		}
		if first, dup := names[n.Name]; dup {
			v.bad(indexPath(p+".nodes", j)+".name", CodeDuplicate, "duplicate node name %q in formula %q (also nodes[%d])", n.Name, f.ID, first)
		} else {
			names[n.Name] = j
		}
	}
	for j := range f.Nodes {
		v.node(p, j, f, &f.Nodes[j], names)
	}
	v.nodeCycles(p, f, names)
}

// node checks one node. Its path is built only when there is a problem:
// a large valid composition should not pay for strings it never shows.
func (v *validator) node(fp string, j int, f *Formula, n *Node, names map[string]int) {
	path := func(field string) string { return indexPath(fp+".nodes", j) + field }
	switch v.c.Operation {
	case "", OpCreate:
		if isBlank(n.Run) && len(n.Files) == 0 {
			v.bad(path(".run"), CodeRequired, "run is required for operation create (or files)")
		}
	case OpDelete:
		if isBlank(n.Delete) {
			v.bad(path(".delete"), CodeRequired, "delete is required for operation delete")
		}
	}
	for _, s := range []struct{ field, text string }{{".run", n.Run}, {".check", n.Check}, {".delete", n.Delete}} {
		if why := ScriptTooLarge(ScriptArgSize(s.text)); why != "" {
			v.bad(path(s.field), CodeTooLarge, "%s", why)
		}
	}
	for k, d := range n.DependsOn {
		switch {
		case d == n.Name:
			v.bad(indexPath(path(".depends_on"), k), CodeCycle, "node %q depends on itself", d)
		case slices.Contains(n.DependsOn[:k], d):
			v.bad(indexPath(path(".depends_on"), k), CodeDuplicate, "node %q is listed twice", d)
		default:
			if _, ok := names[d]; !ok {
				v.bad(indexPath(path(".depends_on"), k), CodeUnknownRef, "unknown node %q in formula %q", d, f.ID)
			}
		}
	}
	if n.Timeout < 0 {
		v.bad(path(".timeout"), CodeValue, "timeout must be greater than 0")
	}
	v.env(path(".env"), n.Env)
	if n.Retry != nil {
		v.retry(path(".retry"), n.Retry)
	}
	v.files(path, n)
	v.outputDecls(path(".outputs"), n)
}

// env checks an environment's variable names and the secret names it
// refers to.
func (v *validator) env(path string, env map[string]EnvValue) {
	for _, k := range sortedKeys(env) {
		if !isEnvName(k) {
			v.bad(keyPath(path, k), CodeValue, "%q is not an environment variable name ([A-Za-z_][A-Za-z0-9_]*)", k)
		}
		if e := env[k]; e.IsSecret() && !strings.Contains(e.Secret, "{{") { // a template is checked once rendered
			if p := SecretNameProblem(e.Secret); p != "" {
				v.bad(keyPath(path, k)+".secret", CodeValue, "%s", p)
			}
		}
	}
}

func isBlank(s string) bool { return strings.TrimSpace(s) == "" }

// IsEnvName reports whether s is a valid environment variable name:
// [A-Za-z_][A-Za-z0-9_]*, at most 255 characters.
func IsEnvName(s string) bool { return isEnvName(s) }

func isEnvName(s string) bool {
	if s == "" || len(s) > 255 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c == '_' || c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z' || i > 0 && c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

func (v *validator) retry(p string, r *RetryPolicy) {
	if r.MaxAttempts < 1 || r.MaxAttempts > MaxRetryAttempts {
		v.bad(p+".max_attempts", CodeValue, "max_attempts must be between 1 and %d", MaxRetryAttempts)
	}
	if r.InitialInterval < 0 {
		v.bad(p+".initial_interval", CodeValue, "initial_interval must not be negative")
	}
	if r.MaxInterval < 0 {
		v.bad(p+".max_interval", CodeValue, "max_interval must not be negative")
	}
	if r.InitialInterval > 0 && r.MaxInterval > 0 && r.MaxInterval < r.InitialInterval {
		v.bad(p+".max_interval", CodeValue, "max_interval %s is less than initial_interval %s", r.MaxInterval, r.InitialInterval)
	}
	if r.Multiplier != 0 && (r.Multiplier < 1 || r.Multiplier > 100) {
		v.bad(p+".multiplier", CodeValue, "multiplier %g must be between 1 and 100", r.Multiplier)
	}
}

func (v *validator) targets(ids map[string]int) {
	nodes := make(map[string]bool)
	for _, f := range v.c.Formulas {
		for _, n := range f.Nodes {
			nodes[n.Name] = true
		}
	}
	seen := make(map[string]bool, len(v.c.Targets))
	for i, t := range v.c.Targets {
		p := indexPath("targets", i)
		switch {
		case !IsToken(t):
			v.bad(p, CodeToken, "target %s", tokenProblem(t))
		case seen[t]:
			v.bad(p, CodeDuplicate, "target %q is listed twice", t)
		case !nodes[t] && !hasKey(ids, t) && !v.isInstance(t):
			v.bad(p, CodeUnknownRef, "unknown target %q: no node or formula has that name", t)
		}
		seen[t] = true
	}
}

// rerun checks the rerun references: "formula/node", each naming a node
// of a formula (or of an instance of a group formula) once, on a create.
func (v *validator) rerun(ids map[string]int) {
	if len(v.c.Rerun) > 0 && v.c.Operation != "" && v.c.Operation != OpCreate {
		v.bad("rerun", CodeValue, "rerun applies to a create, not to operation %s", v.c.Operation)
		return
	}
	seen := make(map[string]bool, len(v.c.Rerun))
	for i, r := range v.c.Rerun {
		p := indexPath("rerun", i)
		fid, node, ok := strings.Cut(r, "/")
		f := v.formulaOf(fid, ids)
		switch {
		case !ok || !IsToken(fid) || !IsToken(node):
			v.bad(p, CodeValue, "rerun %q: name a node as formula/node", r)
		case seen[r]:
			v.bad(p, CodeDuplicate, "rerun %q is listed twice", r)
		case f == nil:
			v.bad(p, CodeUnknownRef, "rerun %q: no formula (or instance of a group formula) %q", r, fid)
		case !slices.ContainsFunc(f.Nodes, func(n Node) bool { return n.Name == node }):
			v.bad(p, CodeUnknownRef, "rerun %q: formula %s has no node %s", r, f.ID, node)
		}
		seen[r] = true
	}
}

// formulaOf is the formula id names, or whose instance it names; nil when
// none.
func (v *validator) formulaOf(id string, ids map[string]int) *Formula {
	if i, ok := ids[id]; ok {
		return &v.c.Formulas[i]
	}
	return v.instanceOf(id)
}

// isInstance reports whether id names an instance of a group formula
// (InstanceID: "<formula>-<host token>" for a host of its group).
func (v *validator) isInstance(id string) bool { return v.instanceOf(id) != nil }

// instanceOf is the group formula id names an instance of, or nil.
func (v *validator) instanceOf(id string) *Formula {
	for i := range v.c.Formulas {
		f := &v.c.Formulas[i]
		if f.Group == "" || !strings.HasPrefix(id, f.ID+"-") {
			continue
		}
		if v.hostsOf == nil {
			v.hostsOf = groupHostsOnce(v.c)
		}
		if _, ok := v.c.Groups[f.Group]; ok && slices.ContainsFunc(v.hostsOf(f.Group), func(h string) bool { return InstanceID(f.ID, h) == id }) {
			return f
		}
	}
	return nil
}

func hasKey[V any](m map[string]V, k string) bool { _, ok := m[k]; return ok }

// formulaCycles reports each cycle among formulas once, naming it.
func (v *validator) formulaCycles(ids map[string]int) {
	fs := v.c.Formulas
	adj := make([][]int, len(fs))
	for i, f := range fs {
		for _, d := range f.DependsOn {
			if k, ok := ids[d.Formula]; ok && k != i && fs[k].ID == d.Formula {
				adj[i] = append(adj[i], k)
			}
		}
		for _, k := range v.edges.formulas[i] {
			if !slices.Contains(adj[i], k) {
				adj[i] = append(adj[i], k)
			}
		}
	}
	for _, cyc := range findCycles(adj) {
		names := make([]string, len(cyc)+1)
		reads := ""
		for i, k := range cyc {
			names[i] = fs[k].ID
			if next := cyc[(i+1)%len(cyc)]; slices.Contains(v.edges.formulas[k], next) {
				reads = " (a formula that reads another's output depends on it)"
			}
		}
		names[len(cyc)] = fs[cyc[0]].ID
		v.bad(indexPath("formulas", cyc[0])+".depends_on", CodeCycle, "dependency cycle between formulas: %s%s", strings.Join(names, " -> "), reads)
	}
}

// nodeCycles reports each cycle among the nodes of a formula.
func (v *validator) nodeCycles(p string, f *Formula, names map[string]int) {
	// A cycle needs a dependency on a node listed later (or unnamed); in
	// the common case there is none and the search is skipped.
	deps := func(j int) []string {
		if extra := v.edges.nodes[&f.Nodes[j]]; len(extra) > 0 {
			return append(slices.Clip(effectiveNodeDeps(f, j)), extra...)
		}
		return effectiveNodeDeps(f, j)
	}
	forward := false
	for j := range f.Nodes {
		for _, d := range deps(j) {
			if k, ok := names[d]; ok && k >= j {
				forward = true
			}
		}
	}
	if !forward {
		return
	}
	adj := make([][]int, len(f.Nodes))
	for j := range f.Nodes {
		for _, d := range deps(j) {
			if k, ok := names[d]; ok && k != j && f.Nodes[k].Name == d && !slices.Contains(adj[j], k) {
				adj[j] = append(adj[j], k)
			}
		}
	}
	for _, cyc := range findCycles(adj) {
		ns := make([]string, len(cyc)+1)
		reads := ""
		for i, k := range cyc {
			ns[i] = f.Nodes[k].Name
			if next := f.Nodes[cyc[(i+1)%len(cyc)]].Name; slices.Contains(v.edges.nodes[&f.Nodes[k]], next) {
				reads = " (a node that reads another's output depends on it)"
			}
		}
		ns[len(cyc)] = f.Nodes[cyc[0]].Name
		v.bad(indexPath(p+".nodes", cyc[0])+".depends_on", CodeCycle, "dependency cycle between nodes of formula %q: %s%s", f.ID, strings.Join(ns, " -> "), reads)
	}
}

// effectiveNodeDeps is a node's depends_on, or the previous node when none
// is given and the formula runs one node at a time.
func effectiveNodeDeps(f *Formula, j int) []string {
	n := &f.Nodes[j]
	if n.dependsOnSet || n.DependsOn != nil {
		return n.DependsOn
	}
	if (f.MaxParallel == 0 || f.MaxParallel == 1) && j > 0 {
		return []string{f.Nodes[j-1].Name}
	}
	return nil
}
