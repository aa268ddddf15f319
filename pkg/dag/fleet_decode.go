package dag

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
)

// Decoding of the fleet fields: vars, labels, groups, limits, rollouts.

// scalars reads a map of text values (numbers and booleans become their
// text), as vars and labels are.
func (d *decoder) scalars(dst *map[string]string) func(*Value, string) {
	return func(v *Value, path string) {
		if !d.want(v, path, KindMap) {
			return
		}
		out := make(map[string]string, len(v.Keys))
		for i, k := range v.Keys {
			val, kpath := v.Vals[i], keyPath(path, k)
			d.mark(kpath, val)
			switch val.Kind {
			case KindString, KindNumber, KindBool:
				out[k] = val.Scalar
			default:
				d.ps.add(kpath, val.Line, CodeType, "expected a string, number or boolean, got %s", val.describe())
			}
		}
		*dst = out
	}
}

func (d *decoder) groups(v *Value, path string) map[string]Group {
	if !d.want(v, path, KindMap) {
		return nil
	}
	out := make(map[string]Group, len(v.Keys))
	for i, name := range v.Keys {
		var g Group
		d.object(v.Vals[i], keyPath(path, name), fields{
			"labels": d.scalars(&g.Labels),
			"hosts":  d.strings(&g.Hosts),
		})
		out[name] = g
	}
	return out
}

func (d *decoder) limits(v *Value, path string) []Limit {
	if !d.want(v, path, KindList) {
		return nil
	}
	out := make([]Limit, len(v.Items))
	for i, it := range v.Items {
		ip := indexPath(path, i)
		d.mark(ip, it)
		l := &out[i]
		d.object(it, ip, fields{
			"labels":       d.scalars(&l.Labels),
			"group":        d.str(&l.Group),
			"max_parallel": d.integer(&l.MaxParallel),
		})
	}
	return out
}

func (d *decoder) rollout(v *Value, path string) *Rollout {
	r := &Rollout{}
	d.object(v, path, fields{
		"batch":      d.amount(&r.Batch),
		"max_failed": d.amount(&r.MaxFailed),
	})
	return r
}

// amount reads N or "N%".
func (d *decoder) amount(dst *Amount) func(*Value, string) {
	return func(v *Value, path string) {
		a, err := parseAmount(v)
		if err != nil {
			d.ps.add(path, v.Line, CodeType, "%v", err)
			return
		}
		*dst = a
	}
}

func parseAmount(v *Value) (Amount, error) {
	switch v.Kind {
	case KindNumber:
		n, err := strconv.Atoi(v.Scalar)
		if err != nil {
			return Amount{}, fmt.Errorf("expected a whole number or a percentage like \"25%%\", got %s", v.Scalar)
		}
		return Amount{N: n}, nil
	case KindString:
		num, ok := strings.CutSuffix(strings.TrimSpace(v.Scalar), "%")
		n, err := strconv.Atoi(num)
		if err != nil {
			return Amount{}, fmt.Errorf("expected a whole number or a percentage like \"25%%\", got %q", v.Scalar)
		}
		return Amount{N: n, Percent: ok}, nil
	}
	return Amount{}, fmt.Errorf("expected a whole number or a percentage like \"25%%\", got %s", v.describe())
}

// Of is the amount of a whole: a percentage rounds down, but never to 0
// when the percentage is not 0 (a batch of "10%" of 3 hosts is 1).
func (a Amount) Of(whole int) int {
	if !a.Percent {
		return a.N
	}
	n := whole * a.N / 100
	if n == 0 && a.N > 0 && whole > 0 {
		n = 1
	}
	return n
}

// Floor is a of whole rounded down, never up to 1: max_failed "10%" of 5
// instances allows none (one failure is 20%), as Ansible's
// max_fail_percentage.
func (a Amount) Floor(whole int) int {
	if !a.Percent {
		return a.N
	}
	return whole * a.N / 100
}

func (a Amount) String() string {
	if a.Percent {
		return strconv.Itoa(a.N) + "%"
	}
	return strconv.Itoa(a.N)
}

// MarshalJSON writes a count as a number and a percentage as "N%".
func (a Amount) MarshalJSON() ([]byte, error) {
	if a.Percent {
		return json.Marshal(a.String())
	}
	return json.Marshal(a.N)
}

// UnmarshalJSON reads N or "N%".
func (a *Amount) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*a = Amount{N: n}
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("expected a whole number or a percentage like \"25%%\": %w", err)
	}
	v, err := parseAmount(&Value{Kind: KindString, Scalar: s})
	if err != nil {
		return err
	}
	*a = v
	return nil
}
