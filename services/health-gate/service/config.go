package service

import (
	"flag"

	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/secrets"
)

// RegisterFlags declares the health-gate's own flags (the services' main
// adds the connection's; gantry dev takes these too).
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Hosts.RegisterFlags(fs)
	secrets.RegisterFlag(fs, &c.SecretsDir)
	fs.IntVar(&c.Concurrency, "concurrency", 32, "gates checked at once")
}

// FlagEnv names the variables of the flags not named GANTRY_<FLAG>.
func (c *Config) FlagEnv() map[string]string {
	return map[string]string{"ssh-user": sshexec.UserEnv}
}

// ReadEnv takes from the worker's environment what no flag sets: the
// ssh-agent's socket, and what local commands keep of it.
func (c *Config) ReadEnv(lookup func(string) (string, bool)) { c.Hosts.ReadEnv(lookup) }

// Check has nothing to check (Run takes a --concurrency below 1 for 32).
func (c *Config) Check() error { return nil }
