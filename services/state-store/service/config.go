package service

import "flag"

// RegisterFlags declares the state-store's own flags: none beyond those
// every service takes (the services' main adds them).
func (c *Config) RegisterFlags(*flag.FlagSet) {}

// Check has nothing to check.
func (c *Config) Check() error { return nil }
