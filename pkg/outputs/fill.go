package outputs

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// Store holds the outputs of nodes (gantry_outputs): eventbus.Bucket and
// eventbustest.MemoryBucket.
type Store interface {
	Get(ctx context.Context, key string) (events.OutputRecord, uint64, error)
	Put(ctx context.Context, key string, v events.OutputRecord, rev uint64) (uint64, error)
}

// ErrMissing: a command reads an output that its producer has not stored.
var ErrMissing = errors.New("output missing")

// Save stores a node's outputs, over what it stored before.
func Save(ctx context.Context, s Store, key string, rec events.OutputRecord) error {
	for range 5 {
		_, rev, err := s.Get(ctx, key)
		switch {
		case errors.Is(err, events.ErrNoRecord):
			rev = 0
		case err != nil && !errors.Is(err, events.ErrBadRecord):
			return fmt.Errorf("store outputs: %w", err)
		}
		if _, err = s.Put(ctx, key, rec, rev); !errors.Is(err, events.ErrChanged) {
			if err != nil {
				return fmt.Errorf("store outputs: %w", err)
			}
			return nil
		}
	}
	return fmt.Errorf("store outputs %s: %w under every try", key, events.ErrChanged)
}

// Record is the record of the values a node's run wrote; secret are the
// names of the node's secret outputs.
func Record(values map[string]string, declared []dag.Output, ref events.Ref, attempt int, specHash string) events.OutputRecord {
	rec := events.OutputRecord{WorkflowID: ref.WorkflowID, Generation: ref.Generation, Attempt: attempt, SpecHash: specHash, Values: values, WrittenAt: time.Now().UTC()}
	for _, o := range declared {
		if o.Secret {
			rec.Secret = append(rec.Secret, o.Name)
		}
	}
	return rec
}

// Public splits a record's values into those any reader of events may see
// and the names of the secret ones that were written.
func Public(rec events.OutputRecord) (public map[string]string, secret []string) {
	for _, k := range slices.Sorted(maps.Keys(rec.Values)) {
		if slices.Contains(rec.Secret, k) {
			secret = append(secret, k)
			continue
		}
		if public == nil {
			public = map[string]string{}
		}
		public[k] = rec.Values[k]
	}
	return public, secret
}

// SecretVar starts the names of the environment variables that carry
// secret outputs into a command.
const SecretVar = "GANTRY_SECRET_OUTPUT_"

// Filler puts the outputs that one command's script and environment read
// into them, reading each producer's record once. A value that is not
// secret goes into the text in place of its marker (quoted as shq quoted
// it). A secret one never enters the script's text: the command gets it
// in an environment variable (SecretVar + a number) with the other
// secrets, masked in its output, and the script reads "${VAR}" where the
// marker was ('"${VAR}"' inside shq's quotes). An environment value that
// reads a secret output becomes a secret itself.
type Filler struct {
	Store    Store
	Workflow string // the composition's name
	records  map[string]*events.OutputRecord
	vars     map[string]string // secret var name -> value
	names    map[dag.OutputRef]string
}

// Script fills the markers of a script.
func (f *Filler) Script(ctx context.Context, s string) (string, error) {
	return dag.ReplaceOutputs(s, func(r dag.OutputRef) (string, error) {
		v, secret, err := f.value(ctx, r)
		if err != nil {
			return "", err
		}
		if !secret {
			return quoted(v, r.Quote), nil
		}
		name := f.secretVar(r, v)
		if r.Quote > 0 {
			return `'"${` + name + `}"'`, nil
		}
		return "${" + name + "}", nil
	})
}

// Env fills the markers of environment values: plain are the plain
// values filled, and secret gains the values that read a secret output.
func (f *Filler) Env(ctx context.Context, env, secret map[string]string) (map[string]string, error) {
	out := make(map[string]string, len(env))
	for k, v := range env {
		reads := false
		filled, err := dag.ReplaceOutputs(v, func(r dag.OutputRef) (string, error) {
			val, s, err := f.value(ctx, r)
			reads = reads || s
			return quoted(val, r.Quote), err
		})
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", k, err)
		}
		if reads && filled != "" {
			secret[k] = filled
			continue
		}
		out[k] = filled
	}
	return out, nil
}

// Secrets adds the secret outputs the script reads to secret, and the
// empty ones (nothing to mask) to env.
func (f *Filler) Secrets(env, secret map[string]string) {
	for k, v := range f.vars {
		if v == "" {
			env[k] = v
			continue
		}
		secret[k] = v
	}
}

// SecretValues are the values of the secret outputs read so far: what
// the command's output must not show.
func (f *Filler) SecretValues() []string {
	var out []string
	for _, rec := range f.records {
		if rec == nil {
			continue
		}
		for _, k := range rec.Secret {
			if v := rec.Values[k]; v != "" {
				out = append(out, v)
			}
		}
	}
	return out
}

func (f *Filler) secretVar(r dag.OutputRef, v string) string {
	key := r
	key.Quote = 0
	if name, ok := f.names[key]; ok {
		return name
	}
	if f.names == nil {
		f.names, f.vars = map[dag.OutputRef]string{}, map[string]string{}
	}
	name := SecretVar + strconv.Itoa(len(f.names)+1)
	f.names[key], f.vars[name] = name, v
	return name
}

// value is the value r reads, and whether it is secret (as the
// composition or the producer's record says).
func (f *Filler) value(ctx context.Context, r dag.OutputRef) (string, bool, error) {
	key := events.OutputKey(f.Workflow, r.Formula, r.Node)
	if f.records == nil {
		f.records = map[string]*events.OutputRecord{}
	}
	rec, seen := f.records[key]
	if !seen {
		got, _, err := f.Store.Get(ctx, key)
		switch {
		case errors.Is(err, events.ErrNoRecord):
		case err != nil:
			return "", false, fmt.Errorf("read the outputs of %s: %w", r.Producer(), err)
		default:
			rec = &got
		}
		f.records[key] = rec
	}
	if rec == nil {
		return "", false, fmt.Errorf("%w: %s %s: node %s has stored no outputs (it has not succeeded since it declared them)", ErrMissing, r.Producer(), r.Name, r.Producer())
	}
	v, ok := rec.Values[r.Name]
	if !ok {
		return "", false, fmt.Errorf("%w: %s %s: node %s did not write %s to $GANTRY_OUTPUT when it ran last (workflow %s)", ErrMissing, r.Producer(), r.Name, r.Producer(), r.Name, rec.WorkflowID)
	}
	return v, r.Secret || slices.Contains(rec.Secret, r.Name), nil
}

// quoted is v as shq quoted it n times around its marker: each time, a
// single quote in it is written '\”.
func quoted(v string, n int) string {
	for range n {
		v = strings.ReplaceAll(v, "'", `'\''`)
	}
	return v
}
