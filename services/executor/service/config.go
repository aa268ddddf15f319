package service

import (
	"flag"

	"github.com/gantry-dev/gantry/pkg/hostexec/sshexec"
	"github.com/gantry-dev/gantry/pkg/hostfile"
	"github.com/gantry-dev/gantry/pkg/secrets"
)

// LabelsEnv is the variable of --labels.
const LabelsEnv = "GANTRY_EXECUTOR_LABELS"

// RegisterFlags declares the executor's own flags (the services' main
// adds the connection's; gantry dev takes these too). Check reads them
// once parsed.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	c.Hosts.RegisterFlags(fs)
	secrets.RegisterFlag(fs, &c.SecretsDir)
	hostfile.RegisterFlag(fs, &c.FilesDir)
	fs.IntVar(&c.MaxFormulas, "max-formulas", 64, "formulas running at once")
	fs.IntVar(&c.PerHost, "per-host", 8, "nodes running at once per host without max_parallel, across all executors")
	fs.StringVar(&c.labels, "labels", "", "zone=ZONE: take only the work of hosts labelled with that zone ($"+LabelsEnv+"; default none: only hosts without a zone)")
}

// FlagEnv names the variables of the flags not named GANTRY_<FLAG>.
func (c *Config) FlagEnv() map[string]string {
	return map[string]string{"labels": LabelsEnv, "ssh-user": sshexec.UserEnv}
}

// ReadEnv takes from the worker's environment what no flag sets: the
// ssh-agent's socket, and what local commands keep of it.
func (c *Config) ReadEnv(lookup func(string) (string, bool)) { c.Hosts.ReadEnv(lookup) }

// Check checks the counts and reads --labels into Labels.
func (c *Config) Check() error {
	if err := CheckCounts(c.MaxFormulas, c.PerHost); err != nil {
		return err
	}
	l, err := ParseLabels(c.labels)
	if err != nil {
		return err
	}
	c.Labels = l
	return nil
}
