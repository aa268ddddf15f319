package servicemain

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"strings"

	"github.com/gantry-dev/gantry/pkg/natsconn"
)

// A service's flags follow the CLI's conventions: --name VALUE, each also
// set by an environment variable that its help names with its default. A
// flag on the command line wins over its variable.

// Config is a service's own settings: the flags it declares, once, and
// the check of their values once they are parsed. gantry dev takes the
// same flags (see Merge).
type Config interface {
	RegisterFlags(fs *flag.FlagSet)
	Check() error
}

// EnvNamer is a Config some of whose flags' variables are not named
// GANTRY_<FLAG>: FlagEnv maps those flags to their variables.
type EnvNamer interface {
	FlagEnv() map[string]string
}

// EnvReader is a Config that takes settings from the process's
// environment that no flag sets (the ssh-agent's socket, what local
// commands keep of the worker's environment): ReadEnv is called once the
// flags are parsed.
type EnvReader interface {
	ReadEnv(lookup func(string) (string, bool))
}

// ReadEnv calls ReadEnv of each config that is an EnvReader.
func ReadEnv(lookup LookupEnv, configs ...Config) {
	for _, c := range configs {
		if r, ok := c.(EnvReader); ok {
			r.ReadEnv(lookup)
		}
	}
}

// LookupEnv reads an environment variable (os.LookupEnv in a process).
type LookupEnv func(name string) (string, bool)

// commonEnv are the variables of the flags every service takes whose
// names are not GANTRY_<FLAG>.
var commonEnv = map[string]string{"metrics": "GANTRY_METRICS_ADDR"}

// Env names the environment variable of each flag: GANTRY_<NAME>
// (--max-formulas: GANTRY_MAX_FORMULAS) unless a table names another.
type Env map[string]string

// EnvOf is the variable table of a service with config c: the
// connection flags' NATS_* (those of the nats CLI), --metrics's
// GANTRY_METRICS_ADDR, and c's own (EnvNamer).
func EnvOf(configs ...Config) Env {
	e := Env{}
	maps.Copy(e, natsconn.FlagEnv)
	maps.Copy(e, commonEnv)
	for _, c := range configs {
		if n, ok := c.(EnvNamer); ok {
			maps.Copy(e, n.FlagEnv())
		}
	}
	return e
}

// Name is the environment variable of the flag named flagName.
func (e Env) Name(flagName string) string {
	if v, ok := e[flagName]; ok {
		return v
	}
	return "GANTRY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// Apply sets every flag of fs that given does not report as given from
// its environment variable, if that is set and not empty. A variable
// that is not a valid value is an error naming it and the flag.
func (e Env) Apply(fs *flag.FlagSet, lookup LookupEnv, given func(flagName string) bool) error {
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		if bad != nil || given(f.Name) {
			return
		}
		name := e.Name(f.Name)
		if v, ok := lookup(name); ok && v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				bad = fmt.Errorf("$%s=%q (--%s): %w", name, v, f.Name, err)
			}
		}
	})
	return bad
}

// Parse parses a service's command line: every flag not given takes its
// environment variable. -h and --help print Usage.
func (e Env) Parse(fs *flag.FlagSet, args []string, lookup LookupEnv, service, doc string) error {
	fs.Usage = func() { e.Usage(fs.Output(), fs, service, doc) }
	if err := fs.Parse(args); err != nil {
		return err
	}
	given := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { given[f.Name] = true })
	return e.Apply(fs, lookup, func(n string) bool { return given[n] })
}

// Usage prints a service's help: what it does, then every flag as
// "--name TYPE" with its help, environment variable and default.
func (e Env) Usage(w io.Writer, fs *flag.FlagSet, service, doc string) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n\nEvery flag can also be set by the environment variable its help names; a flag\ngiven on the command line wins.\n\nFlags:\n", service, strings.TrimSpace(doc))
	fs.VisitAll(func(f *flag.Flag) {
		typ, _ := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if typ != "" {
			head += " " + typ
		}
		fmt.Fprintf(w, "%s\n        %s\n", head, e.Help(f))
	})
}

// Help is a flag's help with its environment variable and default added
// where the text does not say them already.
func (e Env) Help(f *flag.Flag) string {
	return e.help(f, true)
}

// help is Help, with the default added only when withDefault.
func (e Env) help(f *flag.Flag, withDefault bool) string {
	_, help := flag.UnquoteUsage(f)
	env := e.Name(f.Name)
	var extra []string
	if !strings.Contains(help, "$"+env) {
		extra = append(extra, "$"+env)
	}
	if withDefault && f.DefValue != "" && !strings.Contains(help, "; default") && !strings.Contains(help, "(default") {
		extra = append(extra, "default "+f.DefValue)
	}
	if len(extra) == 0 {
		return help
	}
	return help + " (" + strings.Join(extra, "; ") + ")"
}
