package composition

import (
	"fmt"
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
