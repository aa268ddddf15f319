package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// TestSSHFloorsRunWhatTheirShapeSays runs each of ssh-500's floors with
// the guarantees over 2 real sshd hosts, 4 commands each: every command
// ran once, a bus shape stored a dispatch, a record and an outcome for
// each, and a durable shape ran each as a durable attempt (its files on
// the host). The floors are only floors of ssh-500 if they do what a node
// needs and each of their commands runs.
func TestSSHFloorsRunWhatTheirShapeSays(t *testing.T) {
	const perHost = 4
	f := sshtest.Start(t, 2, sshtest.Options{})
	for _, shape := range sshFloorShapes {
		t.Run(shape.key(), func(t *testing.T) {
			dir := t.TempDir()
			target := rawTarget{keyFile: f.KeyFile, knownHosts: f.KnownHosts, user: f.User, parallel: 2, perHost: perHost,
				command: "echo x >> " + filepath.Join(dir, "ran")}
			for _, h := range f.Hosts {
				target.addrs = append(target.addrs, h.Addr)
			}
			attempts := ""
			if shape.durable {
				attempts = filepath.Join(dir, "attempts")
			}
			run, closeRun, err := floorCommands(target, attempts)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			commands := len(f.Hosts) * perHost
			if shape.bus {
				url, auth := startFloorServer(t)
				_, err = chainsOverBus(ctx, busChains{url: url, auth: auth, target: target, more: shape.more}, run)
				want := map[string]int{"DISPATCH": len(f.Hosts), "RECORD": commands, "OUTCOME": commands, "MORE": shape.more * commands}
				for name, n := range streamCounts(ctx, t, url, auth, "DISPATCH", "RECORD", "OUTCOME", "MORE") {
					if n != want[name] {
						t.Errorf("stream %s holds %d messages, want %d", name, n, want[name])
					}
				}
			} else {
				_, err = chainsDirect(ctx, target, run)
			}
			if err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "ran"))
			if err != nil {
				t.Fatal(err)
			}
			if n := strings.Count(string(b), "x"); n != commands {
				t.Errorf("%d commands ran, want %d", n, commands)
			}
			runs, _ := filepath.Glob(filepath.Join(attempts, "floor-*.run"))
			if shape.durable && len(runs) != commands {
				t.Errorf("%d durable attempts, want %d", len(runs), commands)
			}
			closeRun()
			left, _ := filepath.Glob(filepath.Join(attempts, "floor-*"))
			locks, _ := filepath.Glob(filepath.Join(dir, "locks", "floor-*"))
			if len(left)+len(locks) > 0 {
				t.Errorf("the floor's files stay after it: %q %q", left, locks)
			}
		})
	}
}

// TestSSHFloorReportsAFailure: a command that fails ends each shape with
// an error naming it, not a wall time.
func TestSSHFloorReportsAFailure(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	target := rawTarget{keyFile: f.KeyFile, knownHosts: f.KnownHosts, user: f.User, parallel: 1, perHost: 2,
		command: "exit 3", addrs: []string{f.Hosts[0].Addr}}
	for _, shape := range sshFloorShapes {
		t.Run(shape.key(), func(t *testing.T) {
			attempts := ""
			if shape.durable {
				attempts = filepath.Join(t.TempDir(), "attempts")
			}
			run, closeRun, err := floorCommands(target, attempts)
			if err != nil {
				t.Fatal(err)
			}
			defer closeRun()
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			if shape.bus {
				url, auth := startFloorServer(t)
				_, err = chainsOverBus(ctx, busChains{url: url, auth: auth, target: target, more: shape.more}, run)
			} else {
				_, err = chainsDirect(ctx, target, run)
			}
			if err == nil || !strings.Contains(err.Error(), "exit") {
				t.Errorf("a command exiting 3: err %v, want one saying so", err)
			}
		})
	}
}
