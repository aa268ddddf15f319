package sshtest

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Throwaway users and sudoers rules, for tests of become (sudo). They
// change the machine: AddUser adds a user with useradd (its name
// "gtb" and random hex, its home under /home) and Sudoers a file under
// /etc/sudoers.d named gantry-test-<random>; both are removed when the
// test ends, the user's leftover processes killed by pid first. They
// need root.

// Sudo is the sudo binary.
const Sudo = "/usr/bin/sudo"

var sudoOnce sync.Once

// EnsureSudo installs sudo with apt-get when it is missing.
func EnsureSudo(t testing.TB) {
	t.Helper()
	ensurePackage(t, &sudoOnce, Sudo, "sudo")
}

// AddUser adds a throwaway user (shell /bin/sh, a home directory, no
// password: sudo cannot ask it for one) that logs in to the fleet's hosts
// with the fleet's key, and removes it when the test ends.
func (f *Fleet) AddUser(t testing.TB) string {
	t.Helper()
	name := AddSystemUser(t)
	pub, err := os.ReadFile(f.KeyFile + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(f.UsersDir, name), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	return name
}

// AddSystemUser adds a throwaway user that logs in nowhere (a user to
// become), and removes it when the test ends.
func AddSystemUser(t testing.TB) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Fatalf("adding a user needs root")
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	name := "gtb" + hex.EncodeToString(b[:])
	// useradd fails while another holds the lock on /etc/passwd: again, a
	// few times
	var out []byte
	var err error
	for try := 0; try < 20; try++ {
		out, err = exec.Command("useradd", "-m", "-p", "*", "-s", "/bin/sh", name).CombinedOutput()
		if err == nil {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("useradd %s: %v: %s", name, err, out)
	}
	t.Cleanup(func() { removeUser(t, name) })
	return name
}

// removeUser kills the user's processes (by pid) and deletes it with its
// home.
func removeUser(t testing.TB, name string) {
	u, err := user.Lookup(name)
	if err != nil {
		return
	}
	for try := 0; try < 20; try++ {
		pids := processesOf(u.Uid)
		if len(pids) == 0 {
			break
		}
		for _, pid := range pids {
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
		time.Sleep(50 * time.Millisecond)
	}
	for try := 0; try < 20; try++ {
		out, err := exec.Command("userdel", "-r", name).CombinedOutput()
		if err == nil || strings.Contains(string(out), "does not exist") {
			return
		}
		if try == 19 {
			t.Logf("userdel %s: %v: %s", name, err, out)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// processesOf lists the pids of the processes whose real uid is uid.
func processesOf(uid string) []int {
	var out []int
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/status")
		if err != nil {
			continue
		}
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 1 && f[0] == "Uid:" && f[1] == uid {
				out = append(out, pid)
			}
		}
	}
	return out
}

// Sudoers adds rules (sudoers lines) in a file of their own under
// /etc/sudoers.d, checked with visudo first, and removes it when the test
// ends.
func Sudoers(t testing.TB, rules ...string) {
	t.Helper()
	EnsureSudo(t)
	var b [4]byte
	_, _ = rand.Read(b[:])
	path := "/etc/sudoers.d/gantry-test-" + hex.EncodeToString(b[:])
	tmp := filepath.Join(t.TempDir(), "sudoers")
	if err := os.WriteFile(tmp, []byte(strings.Join(rules, "\n")+"\n"), 0o440); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("visudo", "-cf", tmp).CombinedOutput(); err != nil {
		t.Fatalf("sudoers rules %q: %v: %s", rules, err, out)
	}
	if err := os.WriteFile(path, []byte(strings.Join(rules, "\n")+"\n"), 0o440); err != nil {
		t.Fatal(fmt.Errorf("sudoers: %w", err))
	}
	t.Cleanup(func() { _ = os.Remove(path) })
}
