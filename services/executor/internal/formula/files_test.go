package formula

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostfile"
	"github.com/gantry-dev/gantry/pkg/secrets/secretstest"
)

// filesHarness is a harness whose host is this machine (localexec.Local),
// with a directory for the files and one for the attempts.
type filesHarness struct {
	*harness
	dir, attempts string
}

func newFilesHarness(t *testing.T) *filesHarness {
	h := newHarness()
	h.x.Hosts = runners{r: localexec.Local{}}
	return &filesHarness{harness: h, dir: t.TempDir(), attempts: t.TempDir()}
}

// fileNode is a node placing files, running command ("" for none).
func (h *filesHarness) fileNode(command string, files ...events.WorkFile) events.WorkNode {
	n := node("n", command, 1)
	n.Timeout = dag.Duration(time.Minute)
	n.Env = map[string]dag.EnvValue{"GANTRY_ATTEMPTS": dag.Text(h.attempts)}
	n.Files = files
	return n
}

func inline(path, content string) events.WorkFile {
	return events.WorkFile{Path: path, Kind: events.FileInline, Content: []byte(content)}
}

// run runs the dispatch as workflow id and returns the node's last event.
func (h *filesHarness) run(t *testing.T, id string, op dag.Operation, n events.WorkNode, diff bool) *events.NodeEvent {
	t.Helper()
	d := dispatch(op, 1, n)
	d.WorkflowID, d.Diff = id, diff
	h.runs.Set(id, events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	var last *events.NodeEvent
	for _, e := range h.bus.out.Stored() {
		if ne, ok := e.Payload.(*events.NodeEvent); ok && ne.WorkflowID == id {
			last = ne
		}
	}
	if last == nil {
		t.Fatal("no node event")
	}
	return last
}

func fileStatuses(ev *events.NodeEvent) []string {
	var out []string
	for _, f := range ev.Files {
		out = append(out, filepath.Base(f.Path)+" "+string(f.Status))
	}
	return out
}

// A node with only files succeeds when it writes them and is skipped as
// unchanged when they are in place; with a run, the run gets the paths
// changed in $GANTRY_CHANGED (one a line) and still runs when none did;
// recorded succeeded with the same spec it is skipped unless a file
// changed on the host, which is put back and its run runs again.
func TestFilesInACreate(t *testing.T) {
	t.Parallel()
	h := newFilesHarness(t)
	a, b := filepath.Join(h.dir, "a.conf"), filepath.Join(h.dir, "b.conf")
	only := h.fileNode("", inline(a, "A\n"), inline(b, "B\n"))
	ev := h.run(t, "w1", dag.OpCreate, only, false)
	if ev.Status != dag.NodeSucceeded || !slices.Equal(fileStatuses(ev), []string{"a.conf changed", "b.conf changed"}) || ev.Files[0].SHA256 == "" {
		t.Fatalf("first run: %s %v %+v", ev.Status, fileStatuses(ev), ev.Files)
	}
	ev = h.run(t, "w2", dag.OpCreate, only, false)
	if ev.Status != dag.NodeSkipped || ev.Reason != "unchanged: its files are in place" || !slices.Equal(fileStatuses(ev), []string{"a.conf unchanged", "b.conf unchanged"}) {
		t.Fatalf("second run: %s %q %v", ev.Status, ev.Reason, fileStatuses(ev))
	}

	out := filepath.Join(h.dir, "changed")
	withRun := h.fileNode(`printf '%s|' "$GANTRY_CHANGED" >>`+out, inline(a, "A2\n"), inline(b, "B\n"))
	if ev = h.run(t, "w3", dag.OpCreate, withRun, false); ev.Status != dag.NodeSucceeded {
		t.Fatalf("with run: %s %s", ev.Status, ev.Error)
	}
	if ev = h.run(t, "w4", dag.OpCreate, withRun, false); ev.Status != dag.NodeSucceeded {
		t.Fatalf("with run, again: %s %s", ev.Status, ev.Error)
	}
	if got, _ := os.ReadFile(out); string(got) != a+"||" {
		t.Errorf("$GANTRY_CHANGED was %q, want %q then nothing", got, a)
	}
	done := withRun
	done.AlreadyDone = true
	if ev = h.run(t, "w5", dag.OpCreate, done, false); ev.Status != dag.NodeSkipped || !strings.Contains(ev.Reason, "files are in place") {
		t.Fatalf("already done: %s %q", ev.Status, ev.Reason)
	}
	if err := os.WriteFile(b, []byte("edited by hand\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ev = h.run(t, "w6", dag.OpCreate, done, false); ev.Status != dag.NodeSucceeded || !slices.Equal(fileStatuses(ev), []string{"a.conf unchanged", "b.conf changed"}) {
		t.Fatalf("already done, edited by hand: %s %v %s", ev.Status, fileStatuses(ev), ev.Error)
	}
	if got, _ := os.ReadFile(b); string(got) != "B\n" {
		t.Errorf("the hand edit was not put back: %q", got)
	}
	if got, _ := os.ReadFile(out); string(got) != a+"||"+b+"|" {
		t.Errorf("$GANTRY_CHANGED was %q", got)
	}
}

// A file placed by an attempt that then failed is named in
// $GANTRY_CHANGED again until the node succeeds: in the attempt that
// retries it (where the file is in place already), and in the next
// generation's (`gantry retry`) once the node's attempts ran out; a run
// that reloads on a change would otherwise never reload. The event says
// the file changed; the record forgets it once the node succeeded.
func TestFilesChangedByAFailedAttemptStayChanged(t *testing.T) {
	t.Parallel()
	h := newFilesHarness(t)
	a, out, fails := filepath.Join(h.dir, "a.conf"), filepath.Join(h.dir, "changed"), filepath.Join(h.dir, "fails")
	// The run fails while the file fails holds a line: the first attempt,
	// each time it is written.
	n := h.fileNode(`printf '%s|' "$GANTRY_CHANGED" >>`+out+`; [ -s `+fails+` ] && { : >`+fails+`; exit 1; }; true`, inline(a, "A\n"))
	n.Retry.MaxAttempts = 2
	if err := os.WriteFile(fails, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	ev := h.run(t, "w1", dag.OpCreate, n, false)
	if ev.Status != dag.NodeSucceeded || !slices.Equal(fileStatuses(ev), []string{"a.conf changed"}) {
		t.Fatalf("retried: %s %v %s", ev.Status, fileStatuses(ev), ev.Error)
	}
	if got, _ := os.ReadFile(out); string(got) != a+"|"+a+"|" {
		t.Errorf("$GANTRY_CHANGED was %q, want %q in both attempts", got, a)
	}
	if rec := h.record(dag.OpCreate, "n"); rec.Changed != nil {
		t.Errorf("the record keeps %q after the node succeeded", rec.Changed)
	}

	// Attempts run out: the next generation's attempt names the file.
	b := filepath.Join(h.dir, "b.conf")
	one := h.fileNode(`printf '%s|' "$GANTRY_CHANGED" >>`+out+`; [ -s `+fails+` ] && { : >`+fails+`; exit 1; }; true`, inline(b, "B\n"))
	one.Name = "m"
	if err := os.WriteFile(fails, []byte("x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(out, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	d := dispatch(dag.OpCreate, 1, one)
	d.WorkflowID = "w2"
	h.runs.Set("w2", events.RunSnapshot{Generation: 1, Status: dag.WorkflowRunning})
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if rec, _, _ := h.records.Get(context.Background(), events.NodeKey("w2", dag.OpCreate, "f", "m")); rec.Status != dag.NodeFailed || !slices.Equal(rec.Changed, []string{b}) {
		t.Fatalf("generation 1: record %+v, want failed with %s changed", rec, b)
	}
	d = dispatch(dag.OpCreate, 2, one)
	d.WorkflowID = "w2"
	h.runs.Set("w2", events.RunSnapshot{Generation: 2, Status: dag.WorkflowRunning})
	if err := h.x.Run(context.Background(), d); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(out); string(got) != b+"|"+b+"|" {
		t.Errorf("$GANTRY_CHANGED was %q, want %q in both generations", got, b)
	}
}

// A check compares and writes nothing: a file that differs makes the
// verdict would_change, with a diff when asked; a secret's diff shows
// no content.
func TestFilesInACheck(t *testing.T) {
	t.Parallel()
	h := newFilesHarness(t)
	h.x.Secrets = secretstest.Map{"key": "k3y-line-one\nk3y-line-two"}
	p, k := filepath.Join(h.dir, "app.conf"), filepath.Join(h.dir, "tls.key")
	for path, text := range map[string]string{p: "port=9999\n", k: "old-key-value\n"} {
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	n := h.fileNode("", inline(p, "port=8080\n"), events.WorkFile{Path: k, Kind: events.FileSecret, Secret: "key", Mode: "0600"})
	ev := h.run(t, "w1", dag.OpCheck, n, true)
	if ev.Status != dag.NodeSucceeded || ev.Check != events.CheckWouldChange {
		t.Fatalf("check: %s %s %s", ev.Status, ev.Check, ev.Error)
	}
	wantDiff := "--- a" + p + "\n+++ b" + p + "\n@@ -1 +1 @@\n-port=9999\n+port=8080\n"
	if ev.Files[0].Diff != wantDiff {
		t.Errorf("diff %q, want %q", ev.Files[0].Diff, wantDiff)
	}
	if ev.Files[1].Diff != "content differs (secret: not shown)\n" || ev.Files[1].SHA256 != "" {
		t.Errorf("the secret file: %+v", ev.Files[1])
	}
	if got, _ := os.ReadFile(p); string(got) != "port=9999\n" {
		t.Errorf("a check wrote the file: %q", got)
	}
	if ev = h.run(t, "w2", dag.OpCheck, n, false); ev.Files[0].Diff != "" || ev.Check != events.CheckWouldChange {
		t.Errorf("a check without diff: %s %+v", ev.Check, ev.Files)
	}
	if ev = h.run(t, "w3", dag.OpCreate, n, false); ev.Status != dag.NodeSucceeded {
		t.Fatalf("create: %s %s", ev.Status, ev.Error)
	}
	if got, _ := os.ReadFile(k); string(got) != "k3y-line-one\nk3y-line-two" {
		t.Errorf("the secret file holds %q", got)
	}
	if ev = h.run(t, "w4", dag.OpCheck, n, true); ev.Check != events.CheckOK || ev.Files[0].Status != events.FileUnchanged {
		t.Errorf("check after the create: %s %+v", ev.Check, ev.Files)
	}
}

// The run of a node with a secret file has the file's lines hidden in
// its output, and no event holds the secret.
func TestSecretFileIsMasked(t *testing.T) {
	t.Parallel()
	h := newFilesHarness(t)
	h.x.Secrets = secretstest.Map{"key": "k3y-line-one\nk3y-line-two"}
	k := filepath.Join(h.dir, "tls.key")
	n := h.fileNode("cat "+k+"; echo; cat "+k+" >&2", events.WorkFile{Path: k, Kind: events.FileSecret, Secret: "key"})
	ev := h.run(t, "w1", dag.OpCreate, n, false)
	if ev.Status != dag.NodeSucceeded {
		t.Fatalf("%s %s", ev.Status, ev.Error)
	}
	h.bus.mu.Lock()
	lines := slices.Clone(h.bus.lines)
	h.bus.mu.Unlock()
	if !slices.Contains(lines, "***") {
		t.Errorf("output lines %q, want the secret's lines as ***", lines)
	}
	if strings.Contains(strings.Join(lines, "\n"), "k3y-line") {
		t.Errorf("an output line shows the secret: %q", lines)
	}
	for _, e := range h.bus.out.Stored() {
		if b, _ := json.Marshal(e.Payload); strings.Contains(string(b), "k3y-line") {
			t.Errorf("an event shows the secret: %s", b)
		}
	}
	if ev.StdoutTail != "***\n***\n" {
		t.Errorf("stdout tail %q", ev.StdoutTail)
	}
}

// A source is read from the worker's --files-dir only: one missing, or a
// link out of it, fails the node at once naming it, and nothing runs.
func TestSourceFiles(t *testing.T) {
	t.Parallel()
	h := newFilesHarness(t)
	src := t.TempDir()
	if err := os.WriteFile(filepath.Join(src, "app.tgz"), []byte("archive"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc/passwd", filepath.Join(src, "out")); err != nil {
		t.Fatal(err)
	}
	dir, err := hostfile.OpenDir(src)
	if err != nil {
		t.Fatal(err)
	}
	h.x.Sources = dir
	dst := filepath.Join(h.dir, "app.tgz")
	ev := h.run(t, "w1", dag.OpCreate, h.fileNode("", events.WorkFile{Path: dst, Kind: events.FileSource, Source: "app.tgz"}), false)
	if got, _ := os.ReadFile(dst); ev.Status != dag.NodeSucceeded || string(got) != "archive" {
		t.Fatalf("source: %s %s %q", ev.Status, ev.Error, got)
	}
	for name, want := range map[string]string{"missing.tgz": `source "missing.tgz": not found in ` + src, "out": `source "out" leaves the --files-dir`} {
		n := h.fileNode("touch "+filepath.Join(h.dir, "ran"), events.WorkFile{Path: filepath.Join(h.dir, name), Kind: events.FileSource, Source: name})
		n.Retry.MaxAttempts = 3
		ev := h.run(t, "w-"+name[:3], dag.OpCreate, n, false)
		if ev.Status != dag.NodeFailed || !strings.Contains(ev.Error, want) || ev.Attempt != 1 {
			t.Errorf("%s: %s after %d attempts: %q, want failed at once saying %q", name, ev.Status, ev.Attempt, ev.Error, want)
		}
	}
	if _, err := os.Stat(filepath.Join(h.dir, "ran")); err == nil {
		t.Error("the run of a node whose files could not be read ran")
	}
}
