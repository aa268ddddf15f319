package composition

import (
	"fmt"
	"strings"
)

// Reading the jump host out of an inventory's ssh arguments.

// proxyJump finds the jump host in ssh arguments: -J HOST, -JHOST,
// -o ProxyJump=HOST, -o 'ProxyJump HOST', -oProxyJump=HOST. "" when there
// is none (or ProxyJump=none). It refuses StrictHostKeyChecking=no and a
// ProxyCommand, naming what to write instead.
func proxyJump(args string) (string, error) {
	words, err := shellWords(args)
	if err != nil {
		return "", err
	}
	jump := ""
	set := func(j string) error {
		if strings.EqualFold(j, "none") {
			j = ""
		}
		if strings.Contains(j, ",") {
			return fmt.Errorf("ProxyJump %s goes through more than one host: give the last jump host its own ProxyJump instead", j)
		}
		if jump != "" && j != jump {
			return fmt.Errorf("ProxyJump given twice (%s and %s)", jump, j)
		}
		jump = j
		return nil
	}
	for i := 0; i < len(words); i++ {
		w := words[i]
		var opt string
		switch {
		case w == "-J" || w == "-o":
			if i+1 >= len(words) {
				return "", fmt.Errorf("%s without a value", w)
			}
			i++
			if w == "-J" {
				if err := set(words[i]); err != nil {
					return "", err
				}
				continue
			}
			opt = words[i]
		case strings.HasPrefix(w, "-J"):
			if err := set(w[2:]); err != nil {
				return "", err
			}
			continue
		case strings.HasPrefix(w, "-o"):
			opt = w[2:]
		default:
			continue
		}
		key, val, _ := strings.Cut(strings.TrimSpace(opt), "=")
		if k, v, ok := strings.Cut(key, " "); ok && val == "" {
			key, val = k, v
		}
		key, val = strings.TrimSpace(key), strings.TrimSpace(val)
		switch strings.ToLower(key) {
		case "proxyjump":
			if err := set(val); err != nil {
				return "", err
			}
		case "proxycommand":
			if !strings.EqualFold(val, "none") {
				return "", fmt.Errorf("ProxyCommand %q is refused: gantry runs no proxy command, it jumps through a host of the inventory itself: %s", val, proxyJumpFor(val))
			}
		case "stricthostkeychecking":
			switch strings.ToLower(val) {
			case "no", "off", "false":
				return "", fmt.Errorf("StrictHostKeyChecking=%s is refused: %s", val, hostKeyFix)
			}
		}
	}
	return jump, nil
}

// shellWords splits a command line as a POSIX shell would, for quotes and
// backslashes (no expansions).
func shellWords(s string) ([]string, error) {
	var words []string
	var cur strings.Builder
	in := false // a word has started
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
			if in {
				words = append(words, cur.String())
				cur.Reset()
				in = false
			}
		case c == '\\':
			in = true
			if i+1 < len(s) {
				i++
				cur.WriteByte(s[i])
			}
		case c == '\'':
			in = true
			end := strings.IndexByte(s[i+1:], '\'')
			if end < 0 {
				return nil, fmt.Errorf("unterminated ' quote")
			}
			cur.WriteString(s[i+1 : i+1+end])
			i += end + 1
		case c == '"':
			in = true
			i++
			for ; i < len(s) && s[i] != '"'; i++ {
				if s[i] == '\\' && i+1 < len(s) && strings.IndexByte("\"\\$`", s[i+1]) >= 0 {
					i++
				}
				cur.WriteByte(s[i])
			}
			if i >= len(s) {
				return nil, fmt.Errorf("unterminated \" quote")
			}
		default:
			in = true
			cur.WriteByte(c)
		}
	}
	if in {
		words = append(words, cur.String())
	}
	return words, nil
}

// hostKeyFix says why host key checking stays on, and what to do.
const hostKeyFix = "gantry never connects to a host whose key it has not checked: the executor checks every host key against its known_hosts (--known-hosts); remove the option, and add each host's key once you have checked it (ssh-keyscan -p PORT HOST >> ~/.ssh/known_hosts)"

// sshOptsWithArg are the ssh options that take an argument.
const sshOptsWithArg = "BbcDEeFIiJLlmOoPpQRSWw"

// proxyJumpFor says what to write instead of a ProxyCommand: the
// ProxyJump that reaches the same jump host, when the command is an ssh
// to it (ssh -W %h:%p [-p PORT] [-l USER] [USER@]HOST, or ... nc %h %p).
func proxyJumpFor(command string) string {
	words, err := shellWords(command)
	if err != nil || len(words) == 0 || (words[0] != "ssh" && !strings.HasSuffix(words[0], "/ssh")) {
		return "write -o ProxyJump=JUMPHOST (or -J JUMPHOST), JUMPHOST being a host of the inventory"
	}
	var dest, port, user string
	for i := 1; i < len(words) && dest == ""; i++ {
		w := words[i]
		switch {
		case len(w) == 2 && w[0] == '-' && strings.IndexByte(sshOptsWithArg, w[1]) >= 0:
			if i+1 < len(words) {
				i++
				switch w[1] {
				case 'p':
					port = words[i]
				case 'l':
					user = words[i]
				}
			}
		case strings.HasPrefix(w, "-p") && len(w) > 2:
			port = w[2:]
		case strings.HasPrefix(w, "-l") && len(w) > 2:
			user = w[2:]
		case strings.HasPrefix(w, "-"):
		default:
			dest = w
		}
	}
	if dest == "" {
		return "write -o ProxyJump=JUMPHOST (or -J JUMPHOST), JUMPHOST being a host of the inventory"
	}
	jump := strings.TrimPrefix(dest, "ssh://")
	if user != "" && !strings.Contains(jump, "@") {
		jump = user + "@" + jump
	}
	if port != "" && port != "22" {
		jump += ":" + port
	}
	return fmt.Sprintf("write -o ProxyJump=%s (or -J %s) instead, %s being a host of the inventory (by name or ansible_host)", jump, jump, jump[strings.LastIndex(jump, "@")+1:])
}
