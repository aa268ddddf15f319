package e2e

import (
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// filesFleet is a stack of 3 sshd hosts that a throwaway user with a
// passwordless sudo logs in to, a user to own files, a root-owned
// directory (the login user cannot write in it) for the files, a
// --files-dir with a 20 MiB binary file and a --secrets-dir with a key.
type filesFleet struct {
	s                   *stack
	login, app          string
	base, src, secret   string
	big                 []byte
	bigSum              [32]byte
	hosts               map[string]dag.Host
	dirOf               func(i int) string
	cli                 func(args ...string) (int, string)
	nodeFiles, bigFiles func(doc *events.WorkflowDoc) []events.FileResult
}

func newFilesFleet(t *testing.T) *filesFleet {
	t.Helper()
	sshtest.EnsureSudo(t)
	ff := &filesFleet{src: t.TempDir(), secret: secretValue(t)}
	secrets := t.TempDir()
	if err := os.WriteFile(filepath.Join(secrets, "tls_key"), []byte("-----KEY-----\n"+ff.secret+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ff.big = make([]byte, 20<<20)
	if _, err := rand.Read(ff.big); err != nil {
		t.Fatal(err)
	}
	ff.bigSum = sha256.Sum256(ff.big)
	if err := os.WriteFile(filepath.Join(ff.src, "big.bin"), ff.big, 0o644); err != nil {
		t.Fatal(err)
	}
	ff.s = newStack(t, stackOptions{hosts: 3, secretsDir: secrets, filesDir: ff.src})
	ff.login = ff.s.fleet.AddUser(t)
	sshtest.Sudoers(t, ff.login+" ALL=(ALL) NOPASSWD: ALL")
	ff.app = sshtest.AddSystemUser(t)
	base, err := os.MkdirTemp("", "files-e2e-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(base) })
	if err := os.Chmod(base, 0o755); err != nil {
		t.Fatal(err)
	}
	ff.base = base
	ff.dirOf = func(i int) string { return filepath.Join(base, "h"+strconv.Itoa(i)) }
	ff.hosts = map[string]dag.Host{"me": {Transport: dag.TransportLocal, Vars: map[string]string{"dir": filepath.Join(base, "local")}}}
	for i, h := range ff.s.fleet.Hosts {
		ff.hosts["h"+strconv.Itoa(i)] = dag.Host{Address: h.Addr, User: ff.login, Become: true, Labels: map[string]string{"role": "web"},
			Vars: map[string]string{"port": strconv.Itoa(8081 + i), "dir": ff.dirOf(i)}}
	}
	bin := buildGantry(t)
	ff.cli = func(args ...string) (int, string) {
		cmd := exec.Command(bin, append(args, "--server", ff.s.ns.URL(), "--nkey", ff.s.ns.Keys.SeedFile(events.Operator))...)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, isExit := err.(*exec.ExitError); isExit {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return code, string(out)
	}
	return ff
}

func ptr(s string) *string { return &s }

// composition places, on each host of the group web, a template rendered
// with the host's vars (mode 0640, owned by app, its directory made) and
// the secret key, then runs a command that says what changed and prints
// the key; on h0 a 20 MiB file from the --files-dir; on the local host a
// small file.
func (ff *filesFleet) composition() *dag.Composition {
	return &dag.Composition{Name: "files", Hosts: ff.hosts,
		Groups: map[string]dag.Group{"web": {Labels: map[string]string{"role": "web"}}},
		Formulas: []dag.Formula{
			{ID: "app", Group: "web", Nodes: []dag.Node{{Name: "conf",
				Files: []dag.File{
					{Path: "{{ .Vars.dir }}/app.conf", Template: ptr("port={{ .Vars.port }}\nhost={{ .Host }}\n"), Mode: "0640", Owner: ff.app, Group: ff.app, Mkdir: true},
					{Path: "{{ .Vars.dir }}/tls.key", Secret: "tls_key", Mode: "0600"},
				},
				Run: `printf '%s' "$GANTRY_CHANGED" > {{ .Vars.dir }}/changed; cat {{ .Vars.dir }}/tls.key`}}},
			{ID: "big", Server: "h0", DependsOn: []dag.FormulaDep{{Formula: "app"}}, Nodes: []dag.Node{{Name: "archive",
				Files: []dag.File{{Path: "{{ .Vars.dir }}/big.bin", Source: "big.bin", Mode: "0644"}}}}},
			{ID: "local", Server: "me", Nodes: []dag.Node{{Name: "note",
				Files: []dag.File{{Path: "{{ .Vars.dir }}/note", Content: ptr("on the executor's machine\n"), Mkdir: true}}}}},
		}}
}

func statOf(t *testing.T, p string) (fs.FileInfo, string) {
	t.Helper()
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	u, err := user.LookupId(strconv.Itoa(int(fi.Sys().(*syscall.Stat_t).Uid)))
	if err != nil {
		t.Fatal(err)
	}
	return fi, u.Username
}

// fileResults are a workflow's file results by "node path".
func fileResults(doc *events.WorkflowDoc) map[string]events.FileResult {
	out := map[string]events.FileResult{}
	for _, f := range doc.Formulas {
		for name, n := range f.Nodes {
			for _, r := range n.Files {
				out[name+" "+r.Path] = r
			}
		}
	}
	return out
}

// Files on a fleet of 3 SSH hosts through become, and on the local
// transport: rendered per host, with mode and owner; a second run changes
// nothing (mtimes stay); a hand edit on one host is shown by check --diff
// (exit 4), in gantry status too, and a normal run puts back that file
// only. The 20 MiB source arrives whole. The secret file's content is in
// no event, reply, log line, KV value or JetStream file.
func TestFilesOnAFleet(t *testing.T) {
	ff := newFilesFleet(t)
	s := ff.s
	c := ff.composition()
	id := s.mustSubmit(c)
	doc := s.wait(id, 120*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("first run %s: %s", doc.Status, mustJSON(doc))
	}
	res := fileResults(doc)
	for i := range 3 {
		dir := ff.dirOf(i)
		conf := filepath.Join(dir, "app.conf")
		got, _ := os.ReadFile(conf)
		if want := fmt.Sprintf("port=%d\nhost=h%d\n", 8081+i, i); string(got) != want {
			t.Errorf("h%d app.conf %q, want %q", i, got, want)
		}
		fi, owner := statOf(t, conf)
		if fi.Mode().Perm() != 0o640 || owner != ff.app {
			t.Errorf("h%d app.conf mode %o owner %s, want 0640 %s", i, fi.Mode().Perm(), owner, ff.app)
		}
		if key, _ := os.ReadFile(filepath.Join(dir, "tls.key")); string(key) != "-----KEY-----\n"+ff.secret+"\n" {
			t.Errorf("h%d tls.key is not the secret's file", i)
		}
		if fi, owner := statOf(t, filepath.Join(dir, "tls.key")); fi.Mode().Perm() != 0o600 || owner != "root" {
			t.Errorf("h%d tls.key mode %o owner %s, want 0600 root (become)", i, fi.Mode().Perm(), owner)
		}
		if ch, _ := os.ReadFile(filepath.Join(dir, "changed")); string(ch) != conf+"\n"+filepath.Join(dir, "tls.key") {
			t.Errorf("h%d $GANTRY_CHANGED was %q", i, ch)
		}
		r := res["conf "+conf]
		if sum := sha256.Sum256([]byte(fmt.Sprintf("port=%d\nhost=h%d\n", 8081+i, i))); r.Status != events.FileChanged || r.SHA256 != fmt.Sprintf("%x", sum) {
			t.Errorf("h%d app.conf result %+v", i, r)
		}
		if r := res["conf "+filepath.Join(dir, "tls.key")]; r.Status != events.FileChanged || r.SHA256 != "" {
			t.Errorf("h%d tls.key result %+v, want changed without a hash", i, r)
		}
	}
	big, err := os.ReadFile(filepath.Join(ff.dirOf(0), "big.bin"))
	if err != nil || sha256.Sum256(big) != ff.bigSum {
		t.Errorf("the 20 MiB source did not arrive whole (%d bytes, %v)", len(big), err)
	}
	if note, _ := os.ReadFile(filepath.Join(ff.base, "local", "note")); string(note) != "on the executor's machine\n" {
		t.Errorf("the local host's file: %q", note)
	}

	// Everything set an hour back: a rewrite would show.
	old := time.Now().Add(-time.Hour).Truncate(time.Second)
	var placed []string
	for i := range 3 {
		placed = append(placed, filepath.Join(ff.dirOf(i), "app.conf"), filepath.Join(ff.dirOf(i), "tls.key"))
	}
	placed = append(placed, filepath.Join(ff.dirOf(0), "big.bin"))
	for _, p := range placed {
		if err := os.Chtimes(p, old, old); err != nil {
			t.Fatal(err)
		}
	}
	id2 := s.mustSubmit(c)
	doc = s.wait(id2, 120*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("second run %s", doc.Status)
	}
	for k, r := range fileResults(doc) {
		if r.Status != events.FileUnchanged {
			t.Errorf("second run: %s %s", k, r.Status)
		}
	}
	for f, fd := range doc.Formulas {
		for n, nd := range fd.Nodes {
			if nd.Status != dag.NodeSkipped {
				t.Errorf("second run: %s/%s %s (%s), want skipped", f, n, nd.Status, nd.Reason)
			}
		}
	}
	for _, p := range placed {
		if fi, _ := statOf(t, p); !fi.ModTime().Equal(old) {
			t.Errorf("%s was rewritten by the second run (mtime %s)", p, fi.ModTime())
		}
	}

	// A hand edit on h1: check --diff shows it (and only it), exit 4.
	edited := filepath.Join(ff.dirOf(1), "app.conf")
	if err := os.WriteFile(edited, []byte("port=9999\nhost=h1\n"), 0o640); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(edited, old, old); err != nil {
		t.Fatal(err)
	}
	doc1, _ := json.Marshal(c)
	file := filepath.Join(t.TempDir(), "files.json")
	if err := os.WriteFile(file, doc1, 0o644); err != nil {
		t.Fatal(err)
	}
	code, out := ff.cli("submit", "--check", "--diff", file)
	wantDiff := "--- a" + edited + "\n+++ b" + edited + "\n@@ -1,2 +1,2 @@\n-port=9999\n+port=8082\n host=h1\n"
	if code != 4 || !strings.Contains(out, indent(wantDiff, "        ")) || strings.Count(out, "@@") != 2 {
		t.Fatalf("submit --check --diff: exit %d, want 4 and only h1's diff:\n%s", code, out)
	}
	if !strings.Contains(out, edited+" changed (content) sha256:") || !strings.Contains(out, "app-h0/conf") {
		t.Errorf("submit --check --diff does not list the files:\n%s", out)
	}
	t.Logf("gantry submit --check --diff (exit %d):\n%s", code, out)
	checkID := regexp.MustCompile(`accepted ([0-9a-f-]{36})`).FindStringSubmatch(out)
	if checkID == nil {
		t.Fatalf("no workflow id in\n%s", out)
	}
	if got, _ := os.ReadFile(edited); string(got) != "port=9999\nhost=h1\n" {
		t.Errorf("the check wrote the file: %q", got)
	}
	s.wait(checkID[1], 30*time.Second)
	code, status := ff.cli("status", checkID[1])
	if code != 0 || !strings.Contains(status, "FILES") || !strings.Contains(status, indent(wantDiff, "      ")) {
		t.Errorf("gantry status of the check: exit %d\n%s", code, status)
	}

	// gantry drift asks the hosts the same way: h1's node is changed, by
	// that file.
	code, drift := ff.cli("drift", file)
	if code != 4 || !regexp.MustCompile(`h1 +app-h1 +conf +changed +\S+ +file `+regexp.QuoteMeta(edited)+` changed`).MatchString(drift) ||
		!regexp.MustCompile(`h0 +app-h0 +conf +ok`).MatchString(drift) {
		t.Errorf("gantry drift: exit %d\n%s", code, drift)
	}

	// A normal run puts back that file, and only it.
	id3 := s.mustSubmit(c)
	doc = s.wait(id3, 120*time.Second)
	if doc.Status != dag.WorkflowSucceeded {
		t.Fatalf("third run %s", doc.Status)
	}
	var changed []string
	for k, r := range fileResults(doc) {
		if r.Status == events.FileChanged {
			changed = append(changed, k)
		}
	}
	if !slices.Equal(changed, []string{"conf " + edited}) {
		t.Errorf("the third run changed %v, want only %s", changed, edited)
	}
	if got, _ := os.ReadFile(edited); string(got) != "port=8082\nhost=h1\n" {
		t.Errorf("the hand edit was not put back: %q", got)
	}
	for _, p := range placed {
		if fi, _ := statOf(t, p); p != edited && !fi.ModTime().Equal(old) {
			t.Errorf("%s was rewritten by the third run", p)
		}
	}
	if ch, _ := os.ReadFile(filepath.Join(ff.dirOf(1), "changed")); string(ch) != edited {
		t.Errorf("h1's $GANTRY_CHANGED was %q, want %s", ch, edited)
	}

	// The secret: masked where the run printed it, nowhere else.
	if lines := strings.Join(s.logLines(id), "\n"); !strings.Contains(lines, "conf stdout ***") {
		t.Errorf("the run's output does not show the key masked:\n%s", lines)
	}
	outputs := []string{out, status}
	for _, args := range [][]string{{"status", id, "-o", "json"}, {"watch", id}, {"watch", checkID[1], "-o", "json"}, {"state", "-o", "json"}} {
		_, o := ff.cli(args...)
		outputs = append(outputs, o)
	}
	for i, o := range outputs {
		if strings.Contains(o, ff.secret) {
			t.Errorf("CLI output %d shows the secret:\n%s", i, o)
		}
	}
	if found, read := s.scanStreams(ff.secret); len(found) > 0 || read == 0 {
		t.Errorf("the secret is in %v (%d messages read)", found, read)
	}
	if strings.Contains(s.readLogs(), ff.secret) {
		t.Error("the secret is in the service logs")
	}
	scanned := 0
	err = filepath.WalkDir(s.ns.StoreDir(), func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		scanned += len(b)
		if bytes.Contains(b, []byte(ff.secret)) {
			t.Errorf("the secret is in JetStream's file %s", p)
		}
		return nil
	})
	if err != nil || scanned < 1000 {
		t.Errorf("scanned %d bytes of JetStream's files: %v", scanned, err)
	}
}

func indent(s, with string) string {
	var b strings.Builder
	for l := range strings.SplitSeq(strings.TrimSuffix(s, "\n"), "\n") {
		b.WriteString(with + l + "\n")
	}
	return b.String()
}

func mustJSON(v any) string {
	b, _ := json.MarshalIndent(v, "", "  ")
	return string(b)
}

// Bad files are refused at submit, each named with its path in the
// composition: an inline file over the limit (its size said), a relative
// path, one path managed twice on a host, a source out of --files-dir,
// two sources of content, a bad mode; nothing is run.
func TestFilesBadInputRefused(t *testing.T) {
	s := newStack(t, stackOptions{})
	big := strings.Repeat("x", dag.MaxInlineFile+10)
	c := &dag.Composition{Name: "bad-files", Hosts: map[string]dag.Host{"me": {Transport: dag.TransportLocal}},
		Formulas: []dag.Formula{{ID: "f", Server: "me", Nodes: []dag.Node{
			{Name: "a", Files: []dag.File{{Path: "/tmp/gantry-big", Content: &big}, {Path: "etc/app.conf", Content: ptr("x")}}},
			{Name: "b", Files: []dag.File{{Path: "/tmp/x", Content: ptr("x")}, {Path: "/tmp/y", Source: "../../etc/shadow"},
				{Path: "/tmp/z", Content: ptr("x"), Secret: "k"}, {Path: "/tmp/w", Content: ptr("x"), Mode: "0999"}}},
			{Name: "c", Files: []dag.File{{Path: "/tmp/x", Content: ptr("y")}}},
		}}}}
	b, _ := json.Marshal(c)
	r, code := s.submit(b)
	if code == "" || r.Status != "rejected" {
		t.Fatalf("accepted: %+v", r)
	}
	want := map[string]string{
		"formulas[0].nodes[0].files[0].content": fmt.Sprintf("content is %d bytes, over the %d-byte (256 KiB) limit", dag.MaxInlineFile+10, dag.MaxInlineFile),
		"formulas[0].nodes[0].files[1].path":    `"etc/app.conf" is relative`,
		"formulas[0].nodes[1].files[1].source":  "leaves the worker's --files-dir",
		"formulas[0].nodes[1].files[2].secret":  "not content and secret",
		"formulas[0].nodes[1].files[3].mode":    "not octal",
	}
	for path, msg := range want {
		if !slices.ContainsFunc(r.Problems, func(p dag.Problem) bool { return p.Path == path && strings.Contains(p.Message, msg) }) {
			t.Errorf("no problem at %s saying %q: %+v", path, msg, r.Problems)
		}
	}
	// Twice on one host is found once the rest is right.
	c.Formulas[0].Nodes = []dag.Node{c.Formulas[0].Nodes[1], c.Formulas[0].Nodes[2]}
	c.Formulas[0].Nodes[0].Files = c.Formulas[0].Nodes[0].Files[:1]
	b, _ = json.Marshal(c)
	if r, code = s.submit(b); code == "" || !slices.ContainsFunc(r.Problems, func(p dag.Problem) bool {
		return p.Path == "formulas[0].nodes[1].files[0].path" && strings.Contains(p.Message, "/tmp/x is managed twice on host me")
	}) {
		t.Errorf("one path twice: %+v", r)
	}
}
