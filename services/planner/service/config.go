package service

import (
	"flag"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/busauth"
)

// RegisterFlags declares the planner's own flags (the services' main adds
// the connection's; gantry dev takes these too). Check reads them once
// parsed.
func (c *Config) RegisterFlags(fs *flag.FlagSet) {
	fs.DurationVar(&c.CancelWait, "cancel-wait", DefaultCancelWait, "how long a cancelled workflow waits for the outcomes of its running formulas before it ends cancelled without them (their executors kill what still runs when they next see their work)")
	fs.DurationVar(&c.UnclaimedAfter, "unclaimed-after", DefaultUnclaimedAfter, "how long a formula's dispatch may wait with no executor taking it before the planner reports it, naming the zone (no executor serves it, or its executors are busy)")
	fs.StringVar(&c.namesFile, "identity-names", "", "a JSON file of public nkeys and the names to show for them (gantry auth init writes DIR/names.json): who submitted or controlled a run shows by name when their credentials carry none (an nkey)")
	c.Retention = Retention{Age: DefaultRetentionAge, Keep: DefaultRetentionKeep}
	RegisterRetentionFlags(fs, &c.Retention)
}

// Check checks the durations and reads --identity-names into Names
// (adding to those already there).
func (c *Config) Check() error {
	if c.CancelWait <= 0 {
		return fmt.Errorf("--cancel-wait %s: a positive duration", c.CancelWait)
	}
	if c.UnclaimedAfter <= 0 {
		return fmt.Errorf("--unclaimed-after %s: a positive duration", c.UnclaimedAfter)
	}
	if c.namesFile == "" {
		return nil
	}
	n, err := busauth.ReadNames(c.namesFile)
	if err != nil {
		return fmt.Errorf("--identity-names: %w", err)
	}
	if c.Names == nil {
		c.Names = map[string]string{}
	}
	for k, v := range n {
		c.Names[k] = v
	}
	return nil
}
