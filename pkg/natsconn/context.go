package natsconn

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// natsContext is the part of a `nats` CLI context file gantry uses: the
// JSON the nats CLI writes to ~/.config/nats/context/<name>.json.
type natsContext struct {
	URL         string `json:"url"`
	User        string `json:"user"`
	Password    string `json:"password"`
	Creds       string `json:"creds"`
	NKey        string `json:"nkey"`
	Cert        string `json:"cert"`
	Key         string `json:"key"`
	CA          string `json:"ca"`
	InboxPrefix string `json:"inbox_prefix"`
}

// contextDir is where the nats CLI keeps its contexts: under
// $XDG_CONFIG_HOME, else $HOME/.config (the XDG base directory rules).
func contextDir(getenv func(string) string) string {
	if x := getenv("XDG_CONFIG_HOME"); x != "" {
		return filepath.Join(x, "nats")
	}
	if h := getenv("HOME"); h != "" {
		return filepath.Join(h, ".config", "nats")
	}
	return ""
}

// loadContext reads a context by name (or file path); with no name, the
// context the nats CLI has selected (context.txt), if any.
func loadContext(name string, getenv func(string) string) (natsContext, error) {
	var c natsContext
	dir := contextDir(getenv)
	explicit := name != ""
	if !explicit && dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, "context.txt"))
		if err != nil {
			return c, nil
		}
		name = strings.TrimSpace(string(b))
	}
	if name == "" {
		return c, nil
	}
	path := name
	if !strings.HasSuffix(name, ".json") && !strings.ContainsRune(name, os.PathSeparator) {
		path = filepath.Join(dir, "context", name+".json")
	}
	b, err := os.ReadFile(path)
	if err != nil {
		if !explicit && errors.Is(err, fs.ErrNotExist) {
			return c, nil
		}
		return c, fmt.Errorf("%w: context %q: %w", ErrBadOptions, name, err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("%w: context %s: %w", ErrBadOptions, path, err)
	}
	return c, nil
}
