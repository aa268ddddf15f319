package dag

import (
	"fmt"
	"strings"
)

// Become and identity files. `become: true` on a host, a formula or a
// node runs the commands through sudo -n on the host, as become_user
// (root when none is named); the node's setting wins over its formula's,
// which wins over its host's, for become and become_user alike. As in
// Ansible, become_user alone does not become: it names whom become: true
// becomes. A host's identity_file is the key the worker offers it.

// MaxBecomeUser is the longest become_user.
const MaxBecomeUser = 64

// becomeUserProblem says why s is not a user sudo -u can be given, or "".
func becomeUserProblem(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > MaxBecomeUser {
		return fmt.Sprintf("become_user %q is %d characters; at most %d", trunc(s, 20), len(s), MaxBecomeUser)
	}
	rest := s
	if strings.HasPrefix(s, "#") { // sudo's #uid
		rest = s[1:]
		if rest == "" || strings.Trim(rest, "0123456789") != "" {
			return fmt.Sprintf("become_user %q: a #uid is # and digits", s)
		}
		return ""
	}
	if s[0] == '-' || s[0] == '.' {
		return fmt.Sprintf("become_user %q starts with %q: a user name starts with a letter, digit or _", s, s[0])
	}
	for _, r := range rest {
		ok := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("_.-@$", r)
		if !ok {
			return fmt.Sprintf("become_user %q contains %q: a user name has letters, digits, _ . - @ $", s, r)
		}
	}
	return ""
}

// identityFileProblem says why p is not an identity_file, or "".
func identityFileProblem(p string) string {
	switch {
	case p == "":
		return ""
	case strings.ContainsAny(p, "\x00\n\r"):
		return fmt.Sprintf("identity_file %q holds a NUL or a line break", p)
	case !strings.HasPrefix(p, "/") && !strings.HasPrefix(p, "~/"):
		return fmt.Sprintf("identity_file %q is relative: give a path on the worker that starts with / or ~/ (the worker's home)", p)
	}
	return ""
}

// hostBecome checks a host's become_user and identity_file, and that a
// host of transport local neither becomes nor names a key.
func (v *validator) hostBecome(p string, h Host) {
	if prob := becomeUserProblem(h.BecomeUser); prob != "" {
		v.bad(p+".become_user", CodeValue, "%s", prob)
	}
	if prob := identityFileProblem(h.IdentityFile); prob != "" {
		v.bad(p+".identity_file", CodeValue, "%s", prob)
	}
	if h.Transport != TransportLocal {
		return
	}
	if h.Become {
		v.bad(p+".become", CodeValue, "transport local runs commands as the executor's own user: become (sudo) is for ssh hosts")
	}
	if h.IdentityFile != "" {
		v.bad(p+".identity_file", CodeValue, "transport local uses no SSH key: identity_file is for ssh hosts")
	}
}

// formulaBecome checks the become settings of a formula and its nodes:
// the users' names, and that nothing becomes on a host of transport local
// (its server, or any host of its group).
func (v *validator) formulaBecome(p string, f *Formula) {
	if prob := becomeUserProblem(f.BecomeUser); prob != "" {
		v.bad(p+".become_user", CodeValue, "%s", prob)
	}
	for j := range f.Nodes {
		if prob := becomeUserProblem(f.Nodes[j].BecomeUser); prob != "" {
			v.bad(indexPath(p+".nodes", j)+".become_user", CodeValue, "%s", prob)
		}
	}
	for _, name := range v.formulaHosts(f) {
		h, ok := v.c.Hosts[name]
		if !ok || h.Transport != TransportLocal {
			continue
		}
		fb, _ := resolveBecome(h.Become, "", f.Become, "")
		if fb {
			v.bad(p+".become", CodeValue, "formula %q runs on host %q of transport local, which cannot become: become (sudo) is for ssh hosts", f.ID, name)
		}
		for j := range f.Nodes {
			if nb, _ := resolveBecome(fb, "", f.Nodes[j].Become, ""); nb && !fb {
				v.bad(indexPath(p+".nodes", j)+".become", CodeValue, "node %q runs on host %q of transport local, which cannot become: become (sudo) is for ssh hosts", f.Nodes[j].Name, name)
			}
		}
		return
	}
}

// formulaHosts are the hosts a formula runs on: its server, or its
// group's.
func (v *validator) formulaHosts(f *Formula) []string {
	if f.Group == "" {
		return []string{f.Server}
	}
	if _, ok := v.c.Groups[f.Group]; !ok {
		return nil
	}
	if v.hostsOf == nil {
		v.hostsOf = groupHostsOnce(v.c)
	}
	return v.hostsOf(f.Group)
}

// resolveBecome is what applies below a level whose own setting is
// (own, ownUser), above which (become, user) applies.
func resolveBecome(become bool, user string, own *bool, ownUser string) (bool, string) {
	if own != nil {
		become = *own
	}
	if ownUser != "" {
		user = ownUser
	}
	return become, user
}

// normalizeBecome writes onto formula f and its nodes the become that
// applies to them, when it is to become: become: true and the user
// (node over formula over host).
func normalizeBecome(c *Composition, f *Formula) {
	h := c.Hosts[f.Server]
	fb, fu := resolveBecome(h.Become, h.BecomeUser, f.Become, f.BecomeUser)
	if fb {
		f.Become, f.BecomeUser = boolPtr(true), fu
	}
	for j := range f.Nodes {
		n := &f.Nodes[j]
		if nb, nu := resolveBecome(fb, fu, n.Become, n.BecomeUser); nb {
			n.Become, n.BecomeUser = boolPtr(true), nu
		}
	}
}

func boolPtr(b bool) *bool { return &b }

// Becomes says whether a normalized node or formula's commands run
// through sudo, and as whom ("" : sudo's default, root).
func Becomes(become *bool, user string) (bool, string) {
	if become == nil || !*become {
		return false, ""
	}
	return true, user
}
