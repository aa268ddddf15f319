package dag

import (
	"fmt"
	"strings"
)

// Host names. A host may be named as machines are: an IPv4 address
// (10.0.0.5), a fully qualified name (web-1.example.com) or a plain name
// (cp-0). NATS subjects and the state's keys split on dots, so wherever a
// host's name goes into one, it goes as its host token: the name with
// every '.' written '_' (decky.10_0_0_5.lifecycle). A name without dots is
// its own token, as before host names could have dots. Events, records,
// replies and the CLI keep and show the name itself.
//
// The token is not reversible ("web_1" and "web.1" have the same one):
// a composition whose host names share a token is rejected, naming both,
// and whoever reads by token (the state's per-host records, subjects)
// checks the name the event or record carries.

// MaxHostNameLen is the longest host name (a DNS name's limit); each part
// between dots is at most MaxTokenLen.
const MaxHostNameLen = 253

// IsHostName reports whether s is a host name: one or more parts joined
// by '.', each a token ([a-z0-9][a-z0-9_-]{0,62}), at most MaxHostNameLen
// in all.
func IsHostName(s string) bool {
	if len(s) == 0 || len(s) > MaxHostNameLen {
		return false
	}
	for part := range strings.SplitSeq(s, ".") {
		if !IsToken(part) {
			return false
		}
	}
	return true
}

// HostToken is the host token of a host name: the name with every '.'
// written '_'. It is what subjects (decky.<token>.lifecycle) and the
// state's per-host keys carry.
func HostToken(name string) string { return strings.ReplaceAll(name, ".", "_") }

// IsHostToken reports whether s can be the host token of a subject: a
// host name without dots.
func IsHostToken(s string) bool {
	return len(s) <= MaxHostNameLen && !strings.Contains(s, ".") && isTokenChars(s)
}

// isTokenChars reports whether s matches [a-z0-9][a-z0-9_-]*.
func isTokenChars(s string) bool {
	if s == "" {
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

// HostNameProblem says why s is not a host name (see IsHostName), or ""
// when it is one.
func HostNameProblem(s string) string {
	if IsHostName(s) {
		return ""
	}
	return hostNameProblem(s)
}

const hostRule = "host names are parts [a-z0-9][a-z0-9_-]{0,62} joined by dots (10.0.0.5, web-1.example.com)"

func hostNameProblem(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > MaxHostNameLen:
		return fmt.Sprintf("%q is %d characters; host names are at most %d", trunc(s, 20), len(s), MaxHostNameLen)
	case strings.Contains(s, ":"):
		return fmt.Sprintf("%q contains ':'; IPv6 addresses are not host names: name the host and give the address as address: \"[2001:db8::1]:22\"", s)
	case strings.HasPrefix(s, ".") || strings.HasSuffix(s, ".") || strings.Contains(s, ".."):
		return fmt.Sprintf("%q has an empty part between dots; %s", s, hostRule)
	}
	if i := strings.IndexAny(s, " *>"); i >= 0 {
		return fmt.Sprintf("%q contains %q, which would break NATS subjects; %s", s, s[i], hostRule)
	}
	for part := range strings.SplitSeq(s, ".") {
		if !IsToken(part) {
			p := tokenProblem(part)
			if part == s {
				return strings.Replace(p, "names match [a-z0-9][a-z0-9_-]{0,62}", hostRule, 1)
			}
			return fmt.Sprintf("part %s; %s", strings.Replace(p, "; names match [a-z0-9][a-z0-9_-]{0,62}", "", 1), hostRule)
		}
	}
	return fmt.Sprintf("%q is not a host name: %s", s, hostRule)
}

// InstanceID is the id of the instance of group formula formula on host:
// "<formula>-<host token>" (app-web-1, app-10_0_0_5).
func InstanceID(formula, host string) string { return formula + "-" + HostToken(host) }

// hostName checks a host's name, as hosts.<name> of a composition.
func (v *validator) hostName(path, name string) {
	if !IsHostName(name) {
		v.bad(path, CodeToken, "host name %s", hostNameProblem(name))
	}
}

// hostTokens rejects host names that share a host token, naming both:
// their subjects and records would be one host's.
func (v *validator) hostTokens() {
	seen := make(map[string]string, len(v.c.Hosts))
	for _, name := range sortedKeys(v.c.Hosts) {
		tok := HostToken(name)
		if other, dup := seen[tok]; dup {
			v.bad(keyPath("hosts", name), CodeDuplicate,
				"host names %q and %q both have the host token %s (in subjects: decky.%s.lifecycle; a dot is written '_'): rename one", other, name, tok, tok)
			continue
		}
		seen[tok] = name
	}
}
