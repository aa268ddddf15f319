package composition

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// expandHosts expands an Ansible host range: web-[1:3] is web-1, web-2 and
// web-3; db[01:10:3] is db01, db04, db07 and db10 (a leading zero pads to
// the width of the bounds); node-[a:c] is node-a, node-b and node-c; a
// name may hold several ranges. A name without one is itself.
func expandHosts(name string) ([]string, error) {
	out := []string{}
	err := expandInto(&out, name)
	return out, err
}

func expandInto(out *[]string, name string) error {
	open := strings.IndexByte(name, '[')
	if open < 0 {
		if strings.IndexByte(name, ']') >= 0 {
			return fmt.Errorf("']' without '['")
		}
		*out = append(*out, name)
		return nil
	}
	end := strings.IndexByte(name[open:], ']')
	if end < 0 {
		return fmt.Errorf("'[' without ']'")
	}
	head, spec, tail := name[:open], name[open+1:open+end], name[open+end+1:]
	parts := strings.Split(spec, ":")
	if len(parts) < 2 || len(parts) > 3 {
		return fmt.Errorf("[%s] is not a range: write [start:end] or [start:end:step]", spec)
	}
	beg, last := parts[0], parts[1]
	if beg == "" {
		beg = "0"
	}
	step := 1
	if len(parts) == 3 {
		n, err := strconv.Atoi(parts[2])
		if err != nil || n < 1 {
			return fmt.Errorf("step %q is not a whole number above 0", parts[2])
		}
		step = n
	}
	var items []string
	if b, err := strconv.Atoi(beg); err == nil {
		e, err := strconv.Atoi(last)
		if err != nil || b < 0 || e < 0 {
			return fmt.Errorf("[%s]: start and end are both numbers or both letters", spec)
		}
		if b > e {
			return fmt.Errorf("[%s]: the start is after the end", spec)
		}
		if (e-b)/step >= maxHosts {
			return fmt.Errorf("[%s] makes more than %d hosts", spec, maxHosts)
		}
		width := 0
		if len(beg) > 1 && beg[0] == '0' {
			if len(beg) != len(last) {
				return fmt.Errorf("[%s]: a padded range has start and end of the same width", spec)
			}
			width = len(beg)
		}
		for i := b; i <= e; i += step {
			items = append(items, fmt.Sprintf("%0*d", width, i))
		}
	} else {
		const letters = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
		bi, ei := strings.Index(letters, beg), strings.Index(letters, last)
		if len(beg) != 1 || len(last) != 1 || bi < 0 || ei < 0 {
			return fmt.Errorf("[%s]: start and end are both numbers or both letters", spec)
		}
		if bi > ei {
			return fmt.Errorf("[%s]: the start is after the end", spec)
		}
		for i := bi; i <= ei; i += step {
			items = append(items, letters[i:i+1])
		}
	}
	for _, it := range items {
		if len(*out) > maxHosts {
			return fmt.Errorf("makes more than %d hosts", maxHosts)
		}
		if err := expandInto(out, head+it+tail); err != nil {
			return err
		}
	}
	return nil
}

// Host patterns, as Ansible's parse_address reads them: a host name, an
// IPv4 or IPv6 address, any of them holding ranges, and a port after
// (host:22, [::1]:22). What is none of those is a host name as written.

var (
	bracketedHostPort = regexp.MustCompile(`^\[(.+)\]:([0-9]+)$`)
	hostPortRE        = regexp.MustCompile(`^((?:[^:\[\]]|\[[^\]]*\])*):([0-9]+)$`)
	ipv4RE            = regexp.MustCompile(`^(?:` + ipv4Part + `\.){3}` + ipv4Part + `$`)
	ipv6RE            = regexp.MustCompile(ipv6Pattern())
	hostnameRE        = regexp.MustCompile(`(?i)^` + labelRE + `(?:\.` + labelRE + `)*$`)
)

const (
	numericRange = `\[(?:[0-9]+:[0-9]+)(?::[0-9]+)?\]`
	ipv4Part     = `(?:[01]?[0-9]{1,2}|2[0-4][0-9]|25[0-5]|` + numericRange + `)`
	alnumRange   = `\[(?:[a-z]:[a-z]|[0-9]+:[0-9]+)(?::[0-9]+)?\]`
	labelRE      = `(?:[\p{L}\p{N}_]|` + alnumRange + `)(?:[\p{L}\p{N}_-]|` + alnumRange + `)*`
)

// ipv6Pattern spells out the ways an IPv6 address is written, X being a
// part: 0..ffff, or a hexadecimal range.
func ipv6Pattern() string {
	const ways = `(?:X:){7}X|(?:X:){1,6}:|(?:X:)(?::X){1,6}|(?:X:){2}(?::X){1,5}|(?:X:){3}(?::X){1,4}|` +
		`(?:X:){4}(?::X){1,3}|(?:X:){5}(?::X){1,2}|(?:X:){6}(?::X)|:(?::X){1,6}|X?::|` +
		`(?:0:){6}(?:X\.){3}X|::(?:ffff:)?(?:X\.){3}X|(?:0:){5}ffff:(?:X\.){3}X`
	x := `(?:[0-9a-f]{1,4}|\[(?:[0-9a-f]+:[0-9a-f]+)(?::[0-9]+)?\])`
	return `(?i)^(?:` + strings.ReplaceAll(ways, "X", x) + `)$`
}

// parseAddress splits a host pattern from its port, as Ansible's
// parse_address does; ok is false when the rest is not a host name or an
// address.
func parseAddress(s string) (host, port string, ok bool) {
	addr := s
	if m := bracketedHostPort.FindStringSubmatch(addr); m != nil {
		addr, port = m[1], m[2]
	}
	if m := hostPortRE.FindStringSubmatch(addr); m != nil {
		addr, port = m[1], m[2]
	}
	if ipv4RE.MatchString(addr) || ipv6RE.MatchString(addr) || isHostnamePattern(addr) {
		return addr, port, true
	}
	return "", "", false
}

// isHostnamePattern: labels of letters, digits, _ and - (or ranges), none
// ending in _ or -.
func isHostnamePattern(s string) bool {
	if !hostnameRE.MatchString(s) {
		return false
	}
	for _, label := range strings.Split(s, ".") {
		if strings.HasSuffix(label, "_") || strings.HasSuffix(label, "-") {
			return false
		}
	}
	return true
}

// expandHostPattern makes the hosts a pattern names (ranges expanded) and
// their port, as a number, or nil when the pattern has none.
func expandHostPattern(pattern string) ([]string, any, error) {
	host, port, ok := parseAddress(pattern)
	if !ok {
		host, port = pattern, ""
	}
	var p any
	if port != "" {
		n, err := strconv.Atoi(port)
		if err != nil || n > 65535 {
			return nil, nil, fmt.Errorf("host %q: port %s is not a port (1-65535)", pattern, port)
		}
		if n != 0 {
			p = json.Number(strconv.Itoa(n))
		}
	}
	if host == "" {
		return nil, nil, fmt.Errorf("a host needs a name")
	}
	names, err := expandHosts(host)
	if err != nil {
		return nil, nil, fmt.Errorf("host range %q: %w", pattern, err)
	}
	return names, p, nil
}
