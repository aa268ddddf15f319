package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// becomeSetup is a stack with a host that a throwaway user logs in to
// with its own key only (identity_file: the worker's key is not
// authorized for it), whose sudo needs no password; a directory every
// user may write in; and the key's path and a line of its contents.
type becomeSetup struct {
	s        *stack
	login    string
	key      string
	keyLine  string
	dir      string
	hostSpec dag.Host
}

func newBecomeSetup(t *testing.T) *becomeSetup {
	t.Helper()
	sshtest.EnsureSudo(t)
	s := newStack(t, stackOptions{hosts: 1})
	login := s.fleet.AddUser(t)
	sshtest.Sudoers(t, login+" ALL=(ALL) NOPASSWD: ALL")
	key := filepath.Join(t.TempDir(), "id_login")
	sshtest.NewKey(t, key)
	pub, err := os.ReadFile(key + ".pub")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(s.fleet.UsersDir, login), pub, 0o644); err != nil {
		t.Fatal(err)
	}
	pem, err := os.ReadFile(key)
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "become-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o1777); err != nil {
		t.Fatal(err)
	}
	return &becomeSetup{s: s, login: login, key: key, keyLine: strings.Split(string(pem), "\n")[2], dir: dir,
		hostSpec: dag.Host{Address: s.fleet.Hosts[0].Addr, User: login, Become: true, IdentityFile: key}}
}

func ownerOf(t *testing.T, path string) int {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return int(fi.Sys().(*syscall.Stat_t).Uid)
}

// A host with become: true runs its nodes as root through sudo -n: one
// writes a root-owned file, the next reads it back and checks its owner;
// a node with become: false runs as the login user, and the health gate
// as root. The host is reached with its identity_file, whose key never
// travels on the bus (only its path). A host whose sudo wants a password
// fails its node at once, saying so, without retries.
func TestBecomeWorkflow(t *testing.T) {
	b := newBecomeSetup(t)
	s := b.s
	pwUser := s.fleet.AddUser(t)
	sshtest.Sudoers(t, pwUser+" ALL=(ALL) ALL")
	off := false
	f := filepath.Join(b.dir, "root-file")
	c := &dag.Composition{Name: "become", OnFailure: dag.OnFailureContinue,
		Hosts: map[string]dag.Host{"h": b.hostSpec, "pw": {Address: s.fleet.Hosts[0].Addr, User: pwUser, Become: true}},
		Formulas: []dag.Formula{
			{ID: "root", Server: "h", Nodes: []dag.Node{
				{Name: "write", Run: "id -un >" + f + "; chmod 600 " + f},
				{Name: "read", Run: `[ "$(stat -c %U ` + f + `)" = root ] && [ "$(cat ` + f + `)" = root ]`},
				{Name: "plain", Become: &off, Run: "id -un >" + f + ".plain"},
			}, HealthGate: &dag.HealthGate{Check: `[ "$(id -un)" = root ]`, Timeout: dag.Duration(20 * time.Second), Retries: 2}},
			{ID: "denied", Server: "pw", Nodes: []dag.Node{{Name: "n", Run: "touch " + f + ".never",
				Retry: &dag.RetryPolicy{MaxAttempts: 3, InitialInterval: dag.Duration(time.Second)}}}},
		}}
	id := s.mustSubmit(c)
	doc := s.wait(id, 60*time.Second)
	if st := doc.Formulas["root"].Status; st != dag.FormulaHealthy {
		t.Fatalf("formula root %s: %+v", st, doc.Formulas["root"].Nodes)
	}
	if ownerOf(t, f) != 0 || ownerOf(t, f+".plain") == 0 {
		t.Errorf("the become node's file is uid %d's, the plain node's uid %d's: want root's, then not root's", ownerOf(t, f), ownerOf(t, f+".plain"))
	}
	if got, _ := os.ReadFile(f + ".plain"); string(got) != b.login+"\n" {
		t.Errorf("the plain node ran as %q, want %s", got, b.login)
	}
	n := doc.Formulas["denied"].Nodes["n"]
	want := "sudo on " + s.fleet.Hosts[0].Addr + " needs a password for " + pwUser + "; gantry runs sudo -n"
	if n.Status != dag.NodeFailed || n.Attempts > 1 || !strings.Contains(n.Error, want) {
		t.Errorf("the node of the host whose sudo wants a password: %s after %d attempts (%q), want failed at once saying %q", n.Status, n.Attempts, n.Error, want)
	}
	if n.StartedAt != nil && n.EndedAt != nil && n.EndedAt.Sub(*n.StartedAt) > 5*time.Second {
		t.Errorf("it failed after %s", n.EndedAt.Sub(*n.StartedAt))
	}
	if _, err := os.Stat(f + ".never"); err == nil {
		t.Error("the denied node ran")
	}
	if found, read := s.scanStreams(b.keyLine); len(found) > 0 || read == 0 {
		t.Errorf("the identity file's key is on the bus: %v (%d messages read)", found, read)
	}
}

// Cancelling a workflow kills its become node's root-owned process on the
// host (the login user could not signal it).
func TestBecomeCancelKillsRootProcess(t *testing.T) {
	b := newBecomeSetup(t)
	s := b.s
	pidFile := filepath.Join(b.dir, "pid")
	c := &dag.Composition{Name: "become-cancel", Hosts: map[string]dag.Host{"h": b.hostSpec},
		Formulas: []dag.Formula{{ID: "slow", Server: "h", Nodes: []dag.Node{{Name: "wait", Run: "sleep 60 & echo $! >" + pidFile + "; wait"}}}}}
	id := s.mustSubmit(c)
	var pid int
	s.waitFor("the root-owned sleep", 30*time.Second, func() bool {
		got, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(got)))
		return pid > 1
	})
	if uid := procUID(pid); uid != 0 {
		t.Fatalf("sleep %d runs as uid %d, want root", pid, uid)
	}
	if body, code := s.control(id, events.VerbCancel); code != "" {
		t.Fatalf("cancel: %s %s", code, body)
	}
	doc := s.wait(id, 30*time.Second)
	if doc.Status != dag.WorkflowCancelled || doc.Formulas["slow"].Nodes["wait"].Status != dag.NodeCancelled {
		t.Fatalf("workflow %s, node %s", doc.Status, doc.Formulas["slow"].Nodes["wait"].Status)
	}
	if procUID(pid) >= 0 {
		_ = syscall.Kill(pid, syscall.SIGKILL)
		t.Fatalf("the root-owned sleep %d outlived the cancel", pid)
	}
}

// procUID is the real uid of a live (not zombie) process, or -1.
func procUID(pid int) int {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return -1
	}
	uid := -1
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) > 1 && f[0] == "State:" && f[1] == "Z":
			return -1
		case len(f) > 1 && f[0] == "Uid:":
			uid, _ = strconv.Atoi(f[1])
		}
	}
	return uid
}
