package composition

import (
	"cmp"
	"encoding/json"
	"net"
	"slices"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// Mapping a host's merged variables onto a gantry host: its connection
// from the ansible_* variables gantry acts on, and its vars from the
// others but those it leaves out.

// The connection variables gantry acts on, each with the spellings
// Ansible reads; of those set (not null), the last spelling wins, as in
// Ansible (ansible_ssh_host over ansible_host).
var (
	varHost            = []string{"ansible_host", "ansible_ssh_host"}
	varPort            = []string{"ansible_port", "ansible_ssh_port"}
	varUser            = []string{"ansible_user", "ansible_ssh_user"}
	varConnection      = []string{"ansible_connection"}
	varKey             = []string{"ansible_private_key_file", "ansible_ssh_private_key_file"}
	varBecome          = []string{"ansible_become"}
	varBecomeUser      = []string{"ansible_become_user", "ansible_sudo_user"}
	varBecomeMethod    = []string{"ansible_become_method"}
	varSSHArgs         = []string{"ansible_ssh_common_args", "ansible_ssh_extra_args", "ansible_ssh_args"}
	varHostKeyChecking = []string{"ansible_host_key_checking", "ansible_ssh_host_key_checking"}
	varPriority        = "ansible_group_priority"
)

// actedOn holds the variables gantry maps onto its hosts: true for those
// of ssh hosts only, which a host of transport local does not act on.
var actedOn = func() map[string]bool {
	m := map[string]bool{varPriority: false, varConnection[0]: false}
	for _, names := range [][]string{varHost, varPort, varUser, varKey, varBecome, varBecomeUser, varBecomeMethod, varSSHArgs, varHostKeyChecking} {
		for _, n := range names {
			m[n] = true
		}
	}
	return m
}()

// lastSet returns the last of names (a variable's spellings) set to a
// value other than null, and which one it is.
func lastSet(vars map[string]invVar, names []string) (string, invVar, bool) {
	var name string
	var v invVar
	found := false
	for _, n := range names {
		if x, ok := vars[n]; ok && x.val != nil {
			name, v, found = n, x, true
		}
	}
	return name, v, found
}

// connText returns a connection variable's value as text, reporting a
// value that is not text (or a number) or is a Jinja2 template.
func (r *invReader) connText(vars map[string]invVar, names []string) (invVar, string, bool) {
	name, v, ok := lastSet(vars, names)
	if !ok {
		return v, "", false
	}
	s, ok := scalarText(v.val)
	if !ok {
		r.fail(v.source, dag.CodeType, "%s must be text, got %s", name, kindOf(v.val))
		return v, "", false
	}
	if isJinja(s) {
		r.fail(v.source, dag.CodeValue, "%s is a Jinja2 template (%s): gantry does not evaluate Jinja2; write the value", name, s)
		return v, "", false
	}
	return v, s, true
}

// jumpTo is a host's jump host as its ssh arguments name it, and where.
type jumpTo struct {
	host string
	at   source
}

// host maps one host's merged variables onto its connection, and returns
// its jump host as written (resolved to a host by via).
//
// A host of transport local runs commands as the executor's own user:
// its address, user, key, become and ssh arguments are not acted on.
func (r *invReader) host(ih *invHost, vars map[string]invVar) (dag.Host, jumpTo) {
	var h dag.Host
	if r.transport(&h, vars); h.Transport == dag.TransportLocal {
		return h, jumpTo{}
	}
	r.address(&h, ih, vars)
	jump := r.sshArgs(vars)
	r.hostKeyChecking(vars)
	r.become(&h, vars)
	r.identity(&h, vars)
	return h, jump
}

// identity reads the key the worker offers the host: a path on the
// worker, from / or its home (~/).
func (r *invReader) identity(h *dag.Host, vars map[string]invVar) {
	v, key, ok := r.connText(vars, varKey)
	switch {
	case !ok:
	case !strings.HasPrefix(key, "/") && !strings.HasPrefix(key, "~/"):
		r.fail(v.source, dag.CodeValue, "the key %q is a relative path: gantry takes a path on the worker that starts with / or ~/ (the worker's home)", key)
	default:
		h.IdentityFile = key
	}
}

// transport reads ansible_connection: local, or ssh (and its kinds).
func (r *invReader) transport(h *dag.Host, vars map[string]invVar) {
	v, conn, ok := r.connText(vars, varConnection)
	if !ok {
		return
	}
	switch strings.TrimPrefix(conn, "ansible.builtin.") {
	case "ssh", "smart", "paramiko", "paramiko_ssh": // ssh, gantry's default
	case "local":
		h.Transport = dag.TransportLocal
	default:
		r.fail(v.source, dag.CodeValue, "ansible_connection %q is not supported: gantry reaches hosts over ssh or local", conn)
	}
}

// address reads the address (ansible_host, else the host's name), port
// and user, with the problems a composition would find, at the variable
// they come from.
func (r *invReader) address(h *dag.Host, ih *invHost, vars map[string]invVar) {
	addr, host, hasAddr := r.connText(vars, varHost)
	if !hasAddr {
		host = ih.name
	}
	user, login, _ := r.connText(vars, varUser)
	h.Address, h.User = host, login
	port, p, hasPort := r.connText(vars, varPort)
	if hasPort {
		if n, err := strconv.Atoi(strings.TrimSpace(p)); err != nil || n < 1 || n > 65535 {
			r.fail(port.source, dag.CodeValue, "ansible_port %q is not a port (1-65535)", p)
			hasPort = false
		} else {
			h.Address = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(n))
		}
	}
	// The host's name is not checked here: an inventory keeps it as
	// written, and a composition's hosts.<name> is where names are held
	// to gantry's rules.
	for _, p := range dag.HostProblems("h", *h) {
		at := ih.source
		switch {
		case strings.HasSuffix(p.Path, ".address") && hasAddr:
			at = addr.source
		case strings.HasSuffix(p.Path, ".address") && hasPort:
			at = port.source
		case strings.HasSuffix(p.Path, ".user"):
			at = user.source
		}
		r.fail(at, p.Code, "%s", p.Message)
	}
}

// become reads ansible_become, ansible_become_user and
// ansible_become_method: gantry becomes another user with sudo only.
func (r *invReader) become(h *dag.Host, vars map[string]invVar) {
	if name, v, ok := lastSet(vars, varBecome); ok {
		b, ok := ansibleBool(v.val)
		if !ok {
			r.fail(v.source, dag.CodeType, "%s must be a boolean (true or false), got %s", name, shown(v.val))
		}
		h.Become = b
	}
	if _, user, ok := r.connText(vars, varBecomeUser); ok {
		h.BecomeUser = user
	}
	if v, method, ok := r.connText(vars, varBecomeMethod); ok && strings.TrimPrefix(method, "ansible.builtin.") != "sudo" {
		r.fail(v.source, dag.CodeValue, "ansible_become_method %q is not supported: gantry becomes another user with sudo -n (passwordless sudo) only; write ansible_become_method: sudo, or leave it out", method)
	}
}

// sshArgs reads the ssh arguments: the jump host they name, with the
// options refused (StrictHostKeyChecking=no, ProxyCommand).
func (r *invReader) sshArgs(vars map[string]invVar) jumpTo {
	var jump jumpTo
	for _, n := range varSSHArgs {
		v, args, ok := r.connText(vars, []string{n})
		if !ok {
			continue
		}
		j, err := proxyJump(args)
		if err != nil {
			r.fail(v.source, dag.CodeValue, "%s: %v", n, err)
			continue
		}
		if j != "" && jump.host != "" && j != jump.host {
			r.fail(v.source, dag.CodeValue, "%s jumps through %s, but %s through %s: give one", n, j, jump.at.path, jump.host)
			continue
		}
		if j != "" {
			jump = jumpTo{host: j, at: v.source}
		}
	}
	return jump
}

// hostKeyChecking refuses ansible_host_key_checking: false.
func (r *invReader) hostKeyChecking(vars map[string]invVar) {
	name, v, ok := lastSet(vars, varHostKeyChecking)
	if b, isBool := ansibleBool(v.val); ok && isBool && !b {
		r.fail(v.source, dag.CodeValue, "%s: false is refused: %s", name, hostKeyFix)
	}
}

// carried is what a host's variables come to: all of them typed, as
// text those a gantry host carries, and the ansible_* ones gantry does
// not act on. Hosts with the same variables share it: read only.
type carried struct {
	typed   map[string]any
	text    map[string]string
	names   []string // the names in text that hold a typed value's JSON text, sorted
	ignored []string
}

// carry sorts a host's merged variables: gantry's host carries, as text,
// those it does not act on, but for ansible_* ones (ignored), literal
// secrets and ansible-vault values (each a warning). A host of transport
// local does not act on those of ssh hosts.
func (r *invReader) carry(vars map[string]invVar, local bool) *carried {
	c := &carried{typed: make(map[string]any, len(vars))}
	for k, v := range vars {
		c.typed[k] = v.val
		_, vault := v.val.(Vault)
		sshOnly, acted := actedOn[k]
		switch {
		case acted && !(local && sshOnly):
		case vault:
			r.warn(v.source, "%s is encrypted with ansible-vault: gantry does not decrypt it, and leaves it out of the hosts' vars; %s", k, secretHint(k))
		case literalSecret(k, v.val):
			r.warn(v.source, "%s looks like a secret and holds its value: gantry leaves it out of the hosts' vars (they travel as plain text) and never prints it; %s", k, secretHint(k))
		case strings.HasPrefix(k, "ansible_"):
			c.ignored = append(c.ignored, k)
		default:
			if c.text == nil {
				c.text = make(map[string]string, len(vars))
			}
			c.text[k] = varText(v.val)
			if isTyped(v.val) {
				c.names = append(c.names, k)
			}
		}
	}
	slices.Sort(c.ignored)
	slices.Sort(c.names)
	return c
}

// secretHint says how a command gets a secret instead: from a file in the
// executor's --secrets-dir, as {secret: NAME}.
func secretHint(name string) string {
	env := strings.ToUpper(name)
	return "keep the value in a file " + name + " in the executor's --secrets-dir and give it to the commands that need it as env: {" + env + ": {secret: " + name + "}}"
}

// shown is a value in a message: text quoted, anything else as JSON.
func shown(v any) string {
	if s, ok := v.(string); ok {
		return strconv.Quote(s)
	}
	if _, ok := v.(json.Number); ok {
		return varText(v)
	}
	return jsonText(v)
}

// pythonInt reads a whole number as Python's int() does: text with
// digits (and an optional sign), a number (a float cut to its whole
// part), or a boolean (1 or 0).
func pythonInt(v any) (int, bool) {
	switch v := v.(type) {
	case bool:
		if v {
			return 1, true
		}
		return 0, true
	case json.Number:
		if n, err := strconv.Atoi(string(v)); err == nil {
			return n, true
		}
		f, err := strconv.ParseFloat(string(v), 64)
		return int(f), err == nil && f > -1e18 && f < 1e18
	case string:
		n, err := strconv.Atoi(strings.ReplaceAll(strings.TrimSpace(v), "_", ""))
		return n, err == nil && !strings.HasPrefix(strings.TrimSpace(v), "_")
	}
	return 0, false
}

// via finds the host a jump names: by name, else the one host whose
// ansible_host it is.
func (r *invReader) via(name string, jump jumpTo, vars map[string]map[string]invVar) string {
	target := jump.host
	if at := strings.LastIndex(target, "@"); at >= 0 {
		target = target[at+1:]
	}
	if h, _, err := net.SplitHostPort(target); err == nil {
		target = h
	}
	target = strings.Trim(target, "[]")
	found := ""
	if _, ok := r.hosts[target]; ok {
		found = target
	} else {
		if r.byAddress == nil {
			// The first two hosts with each ansible_host, in document order.
			r.byAddress = map[string][]string{}
			for _, other := range r.hostOrder {
				_, a, ok := lastSet(vars[other], varHost)
				if s, text := scalarText(a.val); ok && text {
					if at := strings.Trim(s, "[]"); len(r.byAddress[at]) < 2 {
						r.byAddress[at] = append(r.byAddress[at], other)
					}
				}
			}
		}
		switch hs := r.byAddress[target]; len(hs) {
		case 1:
			found = hs[0]
		case 2:
			r.fail(jump.at, dag.CodeUnknownRef, "ProxyJump %s is the ansible_host of both %s and %s: jump by host name", jump.host, hs[0], hs[1])
			return ""
		}
	}
	switch found {
	case "":
		r.fail(jump.at, dag.CodeUnknownRef, "ProxyJump %s is not a host of the inventory: gantry jumps only through hosts it knows; add it", jump.host)
	case name:
		r.fail(jump.at, dag.CodeCycle, "host %s would jump through itself (ProxyJump %s): override the variable on that host", name, jump.host)
		return ""
	}
	return found
}

// viaCycles reports hosts that jump through each other in a ring, each
// ring once, from its host listed first. A host jumps through one host at
// most: from each host not yet met, it follows the jumps until a host met
// before; when that host was met on this walk, the walk closed a ring.
func (r *invReader) viaCycles(hosts map[string]dag.Host) {
	place := make(map[string]int, len(r.hostOrder)) // 1 + its place in the document
	for i, name := range r.hostOrder {
		place[name] = i + 1
	}
	met := make(map[string]int, len(r.hostOrder)) // the place of the host whose walk met it
	var rings [][]string
	var chain []string
	for i, name := range r.hostOrder {
		chain = chain[:0]
		cur := name
		for ; cur != "" && met[cur] == 0; cur = hosts[cur].Via {
			met[cur] = i + 1
			chain = append(chain, cur)
		}
		if cur == "" || met[cur] != i+1 {
			continue
		}
		ring := chain[slices.Index(chain, cur):]
		at := 0
		for j, h := range ring {
			if place[h] < place[ring[at]] {
				at = j
			}
		}
		rings = append(rings, append(slices.Clone(ring[at:]), ring[:at]...))
	}
	slices.SortFunc(rings, func(a, b []string) int { return cmp.Compare(place[a[0]], place[b[0]]) })
	for _, ring := range rings {
		h := r.hosts[ring[0]]
		r.fail(h.source, dag.CodeCycle, "hosts jump through each other: %s -> %s", strings.Join(ring, " -> "), ring[0])
	}
}

// isTyped says whether a variable's text is a typed value's JSON text
// (a list, a mapping, a number, a boolean), which templates see decoded.
func isTyped(v any) bool {
	switch v.(type) {
	case bool, json.Number, []any, map[string]any:
		return true
	}
	return false
}
