package cli

import (
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/spf13/cobra"
)

// --var k=v and --var-file FILE: extra vars, over the composition's vars
// and every host's own (an inventory's included), as Ansible's -e. They
// go into the composition as extra_vars before it is loaded, so templates
// are rendered with them, and the composition sent carries them: the
// workflow's record (and so a retry) keeps what was used, and gantry
// status shows it (secret-looking names' values as ***).
//
// Every command that loads a composition takes them the same way:
//
//	vf := addVarFlags(cmd)
//	...
//	c, err := vf.loadFile(path)            // validate, plan
//	data, err := vf.readForSubmit(w, path) // submit, drift, reconcile
//	err := vf.applyTo(c)                   // a composition built in code, before it is loaded or sent

// varFlags are a command's --var and --var-file.
type varFlags struct {
	vars  []string
	files []string
}

// addVarFlags adds --var and --var-file to cmd.
func addVarFlags(cmd *cobra.Command) *varFlags {
	f := &varFlags{}
	cmd.Flags().StringArrayVar(&f.vars, "var", nil,
		"set a var, name=value (repeatable): over --var-file, the inventory's and the composition's vars")
	cmd.Flags().StringArrayVar(&f.files, "var-file", nil,
		"read vars from a YAML or JSON mapping of names to values (repeatable; a later file wins): over the inventory's and the composition's vars")
	return f
}

// maxVarFile bounds a --var-file, as a composition is bounded.
const maxVarFile = dag.DefaultMaxBytes

// values are the extra vars: each --var-file in order, then each --var
// over them; nil when none is given. A bad --var is a usage error; a
// --var-file that cannot be read, exit 3; one that is not a mapping of
// names to text, exit 1 with every problem. No value is ever in an error.
func (f *varFlags) values() (map[string]string, error) {
	if f == nil || len(f.vars)+len(f.files) == 0 {
		return nil, nil
	}
	out := map[string]string{}
	for _, path := range f.files {
		vars, err := readVarFile(path)
		if err != nil {
			return nil, err
		}
		maps.Copy(out, vars)
	}
	var bad []error
	for _, kv := range f.vars {
		name, value, ok := strings.Cut(kv, "=")
		switch {
		case !ok && varNameProblem(kv) == "":
			bad = append(bad, fmt.Errorf("--var %s: want name=value (no '=')", kv))
		case !ok: // not shown: it may be a value
			bad = append(bad, fmt.Errorf("--var: want name=value, got an argument of %d characters without '='", len(kv)))
		case varNameProblem(name) != "":
			bad = append(bad, fmt.Errorf("--var: %s", varNameProblem(name)))
		default:
			out[name] = value
		}
	}
	if len(bad) > 0 {
		return nil, &exitError{code: ExitUsage, err: errors.Join(bad...)}
	}
	return out, nil
}

// applyTo sets the extra vars of a composition built in code, before it is
// loaded or sent: over any it has.
func (f *varFlags) applyTo(c *dag.Composition) error {
	vars, err := f.values()
	if err != nil || vars == nil {
		return err
	}
	if c.ExtraVars == nil {
		c.ExtraVars = map[string]string{}
	}
	maps.Copy(c.ExtraVars, vars)
	return nil
}

// loadFile reads, validates and loads a composition file with the extra
// vars (composition.LoadFile without any), passing the warnings of the
// inventory the composition names to warn.
func (f *varFlags) loadFile(path string, warn func(dag.Problem)) (*dag.Composition, error) {
	vars, err := f.values()
	if err != nil {
		return nil, err
	}
	if vars == nil {
		return composition.LoadFileWarn(path, warn)
	}
	return composition.LoadFileWith(path, setExtraVars(vars), warn)
}

// readForSubmit is readComposition with the extra vars: with any, the
// composition is checked here (its problems printed with their lines) and
// sent as JSON with them as extra_vars.
//
// edits change the document too (gantry submit --check), after the vars.
func (f *varFlags) readForSubmit(stderr io.Writer, path string, edits ...composition.Edit) ([]byte, error) {
	vars, err := f.values()
	if err != nil || vars == nil && len(edits) == 0 {
		if err != nil {
			return nil, err
		}
		return readComposition(stderr, path)
	}
	if vars != nil {
		edits = append([]composition.Edit{setExtraVars(vars)}, edits...)
	}
	data, err := composition.ReadForSubmitWith(path, func(root *dag.Value) {
		for _, e := range edits {
			e(root)
		}
	}, warnTo(stderr))
	return checkedForSubmit(stderr, path, data, err)
}

// setExtraVars writes vars into a composition document as extra_vars,
// over any it has (a mapping); a document that is not a mapping is left
// for the decoder to report.
func setExtraVars(vars map[string]string) composition.Edit {
	return func(root *dag.Value) {
		if root.Kind != dag.KindMap {
			return
		}
		merged := map[string]*dag.Value{}
		at := slices.Index(root.Keys, "extra_vars")
		if at >= 0 && root.Vals[at].Kind == dag.KindMap {
			for i, k := range root.Vals[at].Keys {
				merged[k] = root.Vals[at].Vals[i]
			}
		}
		for k, v := range vars {
			merged[k] = &dag.Value{Kind: dag.KindString, Scalar: v}
		}
		ev := &dag.Value{Kind: dag.KindMap}
		for _, k := range slices.Sorted(maps.Keys(merged)) {
			ev.Keys, ev.Vals = append(ev.Keys, k), append(ev.Vals, merged[k])
		}
		if at >= 0 {
			root.Vals[at] = ev
			return
		}
		root.Keys, root.Vals = append(root.Keys, "extra_vars"), append(root.Vals, ev)
	}
}

// readVarFile reads one --var-file: a YAML or JSON mapping of var names to
// strings, numbers or booleans (as text).
func readVarFile(path string) (map[string]string, error) {
	data, err := readBoundedFile(path)
	if err != nil {
		return nil, &exitError{code: ExitProblem, err: fmt.Errorf("--var-file %s: %w", path, err)}
	}
	root, err := composition.Parse(path, data)
	if err != nil {
		return nil, varFileError(path, err)
	}
	if root.Kind != dag.KindMap {
		return nil, failed("--var-file %s:%d: expected a mapping of var names to values, got %s", path, max(root.Line, 1), kindText(root.Kind))
	}
	out := make(map[string]string, len(root.Keys))
	var bad []string
	for i, k := range root.Keys {
		v := root.Vals[i]
		switch {
		case varNameProblem(k) != "":
			bad = append(bad, fmt.Sprintf("--var-file %s:%d: %s", path, v.Line, varNameProblem(k)))
		case v.Kind == dag.KindString || v.Kind == dag.KindNumber || v.Kind == dag.KindBool:
			out[k] = v.Scalar
		default:
			bad = append(bad, fmt.Sprintf("--var-file %s:%d: %s: expected a string, number or boolean, got %s: gantry variables are text", path, v.Line, k, kindText(v.Kind)))
		}
	}
	if len(bad) > 0 {
		return nil, failed("%s", strings.Join(bad, "\n"))
	}
	return out, nil
}

// varFileError turns a parse error of a --var-file into its problems, each
// with the file and line.
func varFileError(path string, err error) error {
	var inv *dag.InvalidError
	if !errors.As(err, &inv) {
		return failed("--var-file %s: %v", path, err)
	}
	lines := make([]string, 0, len(inv.Problems))
	for _, p := range inv.Problems {
		lines = append(lines, fmt.Sprintf("--var-file %s:%d: %s", path, max(p.Line, 1), p.Message))
	}
	return failed("%s", strings.Join(lines, "\n"))
}

func readBoundedFile(path string) ([]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer fh.Close()
	data, err := io.ReadAll(io.LimitReader(fh, maxVarFile+1))
	if err != nil {
		return nil, err
	}
	if len(data) > maxVarFile {
		return nil, fmt.Errorf("over the %d-byte (1 MiB) limit", maxVarFile)
	}
	return data, nil
}

func kindText(k dag.Kind) string {
	switch k {
	case dag.KindNull:
		return "nothing (null)"
	case dag.KindList:
		return "a list"
	case dag.KindMap:
		return "a mapping"
	}
	return "a " + k.String()
}

// varNameProblem says why name cannot be a var given on the command line,
// or "": names are what {{ .Vars.name }} reads.
func varNameProblem(name string) string {
	switch {
	case name == "":
		return "a var needs a name"
	case !dag.IsEnvName(name):
		return fmt.Sprintf("var name %s is not a name: letters, digits and _, not starting with a digit, at most 255 ({{ .Vars.name }} reads it)", quoteShown(name))
	}
	return ""
}

// quoteShown quotes a name for an error, bounded.
func quoteShown(s string) string { return fmt.Sprintf("%q", trimShown(s)) }

func trimShown(s string) string {
	if len(s) > 64 {
		return s[:64] + "..."
	}
	return s
}

// varsText is extra vars as gantry status shows them, by name: "a=1,
// token=***" (values already masked by the services).
func varsText(vars map[string]string) string {
	shown := dag.ShownVars(vars)
	parts := make([]string, 0, len(shown))
	for _, k := range slices.Sorted(maps.Keys(shown)) {
		parts = append(parts, k+"="+shown[k])
	}
	return strings.Join(parts, ", ")
}
