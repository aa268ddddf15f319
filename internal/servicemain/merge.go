package servicemain

import (
	"flag"
	"reflect"
	"strings"
)

// Merge declares the flags of several services in one FlagSet, for a
// process that runs them all (gantry dev): each service registers its
// own flags (Config.RegisterFlags), and a flag that several declare (the
// executor's and the health-gate's --ssh-key) is one flag setting all of
// theirs. Its help is the first declaration's, with its environment
// variable (env) named; its default is left for the command's help to
// show (cobra's does).
func Merge(name string, env Env, configs ...Config) *flag.FlagSet {
	out := flag.NewFlagSet(name, flag.ContinueOnError)
	var order []string
	byName := map[string]*flag.Flag{}
	values := map[string]fanout{}
	for _, c := range configs {
		fs := flag.NewFlagSet(name, flag.ContinueOnError)
		c.RegisterFlags(fs)
		fs.VisitAll(func(f *flag.Flag) {
			if _, seen := byName[f.Name]; !seen {
				byName[f.Name] = f
				order = append(order, f.Name)
			}
			values[f.Name] = append(values[f.Name], f.Value)
		})
	}
	for _, n := range order {
		f := byName[n]
		var v flag.Value = values[n]
		if len(values[n]) == 1 {
			v = f.Value
		}
		out.Var(v, n, env.help(f, false))
		out.Lookup(n).DefValue = f.DefValue
	}
	return out
}

// fanout is one flag setting the same flag of several services.
type fanout []flag.Value

func (f fanout) String() string {
	if len(f) == 0 {
		return ""
	}
	return f[0].String()
}

func (f fanout) Set(s string) error {
	for _, v := range f {
		if err := v.Set(s); err != nil {
			return err
		}
	}
	return nil
}

// IsBoolFlag says whether the flag takes no value (--allow-local).
func (f fanout) IsBoolFlag() bool {
	b, ok := f[0].(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// Type names the value in a cobra command's help, as for the flag it
// stands for.
func (f fanout) Type() string {
	if t, ok := f[0].(interface{ Type() string }); ok {
		return t.Type()
	}
	t := reflect.TypeOf(f[0])
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.TrimSuffix(t.Name(), "Value")
}
