package main

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// TestRawLoopRunsEveryHostsCommands runs the raw x/crypto/ssh loop over 4
// real sshd hosts, 2 at a time, 3 commands each: each host ran its 3, and
// 2 hosts, never more, were worked on at once (each command leaves a
// marker for its host while it runs and counts the markers).
func TestRawLoopRunsEveryHostsCommands(t *testing.T) {
	f := sshtest.Start(t, 4, sshtest.Options{})
	dir := t.TempDir()
	target := rawTarget{keyFile: f.KeyFile, knownHosts: f.KnownHosts, user: f.User, parallel: 2, perHost: 3}
	for _, h := range f.Hosts {
		target.addrs = append(target.addrs, h.Addr)
	}
	// the host's port (the last field of $SSH_CONNECTION) names its files
	target.command = `p=${SSH_CONNECTION##* }; d=` + dir + `; echo x >> $d/$p; touch $d/$p.on; ls $d | grep -c '\.on$' >> $d/at-once; sleep 0.3; rm $d/$p.on`
	if _, err := rawLoop(target); err != nil {
		t.Fatal(err)
	}
	for _, h := range f.Hosts {
		_, port, _ := strings.Cut(h.Addr, ":")
		b, err := os.ReadFile(filepath.Join(dir, port))
		if err != nil {
			t.Fatalf("host %s ran nothing: %v", h.Addr, err)
		}
		if n := strings.Count(string(b), "x"); n != 3 {
			t.Errorf("host %s ran the command %d times, want 3", h.Addr, n)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "at-once"))
	if err != nil {
		t.Fatal(err)
	}
	most := 0
	for _, l := range strings.Fields(string(b)) {
		n, _ := strconv.Atoi(l)
		most = max(most, n)
	}
	if most != 2 {
		t.Errorf("at most %d hosts ran a command at once, want 2 (counts %q)", most, strings.Fields(string(b)))
	}
}

func TestRawLoopReportsAFailure(t *testing.T) {
	f := sshtest.Start(t, 1, sshtest.Options{})
	target := rawTarget{keyFile: f.KeyFile, knownHosts: f.KnownHosts, user: f.User, parallel: 1, perHost: 1,
		command: "exit 3", addrs: []string{f.Hosts[0].Addr}}
	if _, err := rawLoop(target); err == nil || !strings.Contains(err.Error(), f.Hosts[0].Addr) {
		t.Errorf("a command exiting 3: err %v, want one naming the host", err)
	}
}
