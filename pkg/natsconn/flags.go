package natsconn

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
)

// A service's flags follow the CLI's conventions: --name VALUE, each also
// set by an environment variable that its help names with its default. A
// flag on the command line wins over its variable.

// natsEnv are the connection flags' variables: those of the nats CLI,
// read by Resolved (after the flag, before the context).
var natsEnv = map[string]string{
	"server": "NATS_URL", "creds": "NATS_CREDS", "nkey": "NATS_NKEY",
	"tls-ca": "NATS_CA", "tls-cert": "NATS_CERT", "tls-key": "NATS_KEY", "context": "NATS_CONTEXT",
}

// EnvName is the environment variable of a service flag: the nats CLI's
// for the connection flags, the one named in env, else GANTRY_<NAME>
// (--max-formulas: GANTRY_MAX_FORMULAS).
func EnvName(flagName string, env map[string]string) string {
	if e, ok := env[flagName]; ok {
		return e
	}
	if e, ok := natsEnv[flagName]; ok {
		return e
	}
	return "GANTRY_" + strings.ToUpper(strings.ReplaceAll(flagName, "-", "_"))
}

// ParseService parses a service's command line. Every flag not given
// takes its environment variable (EnvName); a variable that is not a
// valid value is an error naming it. -h and --help print Usage.
func ParseService(fs *flag.FlagSet, args []string, service, doc string, env map[string]string) error {
	fs.Usage = func() { Usage(fs.Output(), fs, service, doc, env) }
	var bad error
	fs.VisitAll(func(f *flag.Flag) {
		if _, isNATS := natsEnv[f.Name]; isNATS || bad != nil {
			return
		}
		name := EnvName(f.Name, env)
		if v, ok := os.LookupEnv(name); ok && v != "" {
			if err := fs.Set(f.Name, v); err != nil {
				bad = fmt.Errorf("$%s=%q (--%s): %w", name, v, f.Name, err)
			}
		}
	})
	if bad != nil {
		return bad
	}
	return fs.Parse(args)
}

// Usage prints a service's help: what it does, then every flag as
// "--name TYPE" with its help, environment variable and default.
func Usage(w io.Writer, fs *flag.FlagSet, service, doc string, env map[string]string) {
	fmt.Fprintf(w, "Usage: %s [flags]\n\n%s\n\nEvery flag can also be set by the environment variable its help names; a flag\ngiven on the command line wins.\n\nFlags:\n", service, strings.TrimSpace(doc))
	fs.VisitAll(func(f *flag.Flag) {
		typ, help := flag.UnquoteUsage(f)
		head := "  --" + f.Name
		if typ != "" {
			head += " " + typ
		}
		fmt.Fprintf(w, "%s\n        %s\n", head, FlagHelp(f, help, EnvName(f.Name, env)))
	})
}

// FlagHelp is a flag's help with its environment variable and default
// added where the text does not say them already.
func FlagHelp(f *flag.Flag, help, env string) string {
	var extra []string
	if !strings.Contains(help, "$"+env) {
		extra = append(extra, "$"+env)
	}
	if f.DefValue != "" && !strings.Contains(help, "; default") && !strings.Contains(help, "(default") {
		extra = append(extra, "default "+f.DefValue)
	}
	if len(extra) == 0 {
		return help
	}
	return help + " (" + strings.Join(extra, "; ") + ")"
}
