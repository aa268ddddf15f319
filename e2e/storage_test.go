package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"github.com/gantry-dev/gantry/pkg/natsembed/natstest"
	"github.com/nats-io/nats.go"
)

// devTmpfs is the size of the tmpfs gantry dev keeps its data on in these
// tests: gantry dev wants 1.7 GiB free there (GANTRY_LOGS reserves 1 GiB).
const devTmpfs = 1800 << 20

// TestStorageFullThenFreed: gantry dev keeps its data on a tmpfs that
// fills up in the middle of a run of 32 nodes over two sshd hosts, stays
// full for 30 s, and is freed. While full, the services say which stream
// or bucket they cannot store on (log, `gantry ping`), and a submission
// is answered in time: accepted (and run) or refused naming storage (and
// never run). Once freed, the run completes by itself, each node exactly
// once, with nothing restarted, ping says ok again, and an interrupt stops
// dev quickly.
func TestStorageFullThenFreed(t *testing.T) {
	fleet := sshtest.Start(t, 2, sshtest.Options{})
	fs := natstest.MountTmpfs(t, devTmpfs)
	d := startStorageDev(t, fs, fleet)
	tl := newTimeline()
	note := func(format string, args ...any) {
		what := fmt.Sprintf(format, args...)
		tl.at(what)
		t.Log(what)
	}
	t.Cleanup(func() { t.Logf("timeline:\n%s", tl) })

	first := d.submit(t, storageComposition("storage", fleet, 4, 4, "1"))
	note("submitted %s (32 nodes)", first[:8])
	waitFor(t, 60*time.Second, func() bool { return countMarkers(t, fleet, "storage") >= 6 })
	filler := natstest.FillUp(t, fs)
	note("file system full: %d markers written", countMarkers(t, fleet, "storage"))

	var troubled []string
	var second struct {
		id, out string
		code    int
		took    time.Duration
	}
	for end := time.Now().Add(30 * time.Second); time.Now().Before(end); time.Sleep(2 * time.Second) {
		code, out := d.cli(t, "ping", "--timeout", "5s")
		if code != 0 && strings.Contains(out, "JetStream cannot store on") {
			if troubled == nil {
				note("gantry ping: exit %d: %s", code, oneLine(out))
			}
			troubled = append(troubled, out)
		}
		if second.took == 0 && time.Since(tl.t0) > 10*time.Second {
			start := time.Now()
			second.code, second.out = d.cliFile(t, storageComposition("second", fleet, 1, 2, "0.1"), "submit", "-q")
			second.took = time.Since(start)
			if second.code == 0 { // the id on the last line, after any warning
				lines := strings.Split(strings.TrimSpace(second.out), "\n")
				second.id = lines[len(lines)-1]
			}
			note("second submit while full answered in %.1fs: exit %d: %s", second.took.Seconds(), second.code, oneLine(second.out))
		}
	}
	note("still full: %d markers written", countMarkers(t, fleet, "storage"))
	if err := os.Remove(filler); err != nil {
		t.Fatal(err)
	}
	note("space freed")

	doc := d.wait(t, first, 60*time.Second)
	note("workflow %s %s: %d markers written", first[:8], doc.Status, countMarkers(t, fleet, "storage"))
	if doc.Status != dag.WorkflowSucceeded {
		t.Errorf("workflow %s: %s (%s)", first, doc.Status, doc.Error)
	}
	checkMarkers(t, fleet, "storage", 4, 4)
	switch {
	case second.took > 25*time.Second:
		t.Errorf("the submission while full was answered after %s, past what the CLI waits for", second.took)
	case second.id != "":
		if doc := d.wait(t, second.id, 30*time.Second); doc.Status != dag.WorkflowSucceeded {
			t.Errorf("the workflow accepted while full: %s (%s)", doc.Status, doc.Error)
		}
		checkMarkers(t, fleet, "second", 1, 2)
	case !strings.Contains(second.out, "JetStream cannot store on"):
		t.Errorf("the submission while full was refused without naming storage: exit %d: %s", second.code, second.out)
	default:
		time.Sleep(3 * time.Second) // what was refused must not run later
		if n := countMarkers(t, fleet, "second"); n != 0 {
			t.Errorf("the workflow refused while full ran %d nodes", n)
		}
	}
	if len(troubled) == 0 {
		t.Error("gantry ping never named the storage problem while the file system was full")
	}
	var ok bool
	for end := time.Now().Add(75 * time.Second); !ok && time.Now().Before(end); time.Sleep(time.Second) {
		code, out := d.cli(t, "ping", "--timeout", "5s")
		ok = code == 0 && out == "ok\n"
	}
	if ok {
		note("gantry ping: ok")
	} else {
		t.Error("gantry ping did not say ok after the space came back")
	}
	for _, want := range []string{"JetStream cannot store on", "space is back", "JetStream stores on"} {
		if !strings.Contains(d.logs(t), want) {
			t.Errorf("gantry dev's log does not say %q", want)
		}
	}
	if d.exited() {
		t.Fatal("gantry dev exited by itself")
	}
	if n := d.nc.Stats().Reconnects; n != 0 {
		t.Errorf("the test's connection reconnected %d times: the server restarted", n)
	}
	took := d.interrupt(t, 35*time.Second)
	note("interrupted: gantry dev stopped in %.1fs", took.Seconds())
	if took > 15*time.Second {
		t.Errorf("gantry dev took %s to stop", took)
	}
}

// TestDevStopsWhileStorageFull: an interrupt stops gantry dev quickly
// even while the services wait for JetStream to store (its disk full).
func TestDevStopsWhileStorageFull(t *testing.T) {
	fleet := sshtest.Start(t, 1, sshtest.Options{})
	fs := natstest.MountTmpfs(t, devTmpfs)
	d := startStorageDev(t, fs, fleet)
	d.submit(t, storageComposition("storage", fleet, 4, 4, "1"))
	waitFor(t, 60*time.Second, func() bool { return countMarkers(t, fleet, "storage") >= 4 })
	natstest.FillUp(t, fs)
	time.Sleep(10 * time.Second) // the work in flight now waits for storage
	took := d.interrupt(t, 90*time.Second)
	t.Logf("gantry dev stopped %.1fs after the interrupt, its disk full", took.Seconds())
	if took > 15*time.Second {
		t.Errorf("gantry dev took %s to stop while its disk was full", took)
	}
}

// dev is a gantry dev process, and an operator's connection to it.
type dev struct {
	bin, url, nkey string
	cmd            *exec.Cmd
	stderr         string
	done           chan struct{}
	code           int
	nc             *nats.Conn
	cl             *client.Client // over nc
	dir            string
}

// gantryBin is $GANTRY_BIN/gantry when set (make build), else built from
// this tree.
func gantryBin(t *testing.T) string {
	if dir := os.Getenv("GANTRY_BIN"); dir != "" {
		p, _ := filepath.Abs(filepath.Join(dir, "gantry"))
		return p
	}
	return buildGantry(t)
}

// startDev runs gantry dev with its data on dir, for fleet's hosts.
func startStorageDev(t *testing.T, dir string, fleet *sshtest.Fleet) *dev {
	t.Helper()
	home := t.TempDir()
	d := &dev{bin: gantryBin(t), stderr: filepath.Join(home, "dev.log"), done: make(chan struct{}), dir: home}
	port := loopbackPort(t)
	d.cmd = exec.Command(d.bin, "dev", "--port", strconv.Itoa(port), "--data-dir", filepath.Join(dir, "dev"),
		"--ssh-key", fleet.KeyFile, "--known-hosts", fleet.KnownHosts, "--ssh-agent=false")
	d.cmd.Env = append(os.Environ(), "HOME="+home, "XDG_RUNTIME_DIR="+home, "XDG_DATA_HOME="+home)
	stdout, err := d.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errf, err := os.Create(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	d.cmd.Stderr = errf
	if err := d.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		err := d.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			d.code = ee.ExitCode()
		}
		errf.Close()
		close(d.done)
	}()
	t.Cleanup(func() {
		if !d.exited() {
			_ = d.cmd.Process.Kill()
			<-d.done
		}
		if t.Failed() {
			t.Logf("gantry dev's log:\n%s", tail(d.logs(t), 8000))
		}
	})
	d.readBanner(t, stdout)
	opt, err := nats.NkeyOptionFromSeed(d.nkey)
	if err != nil {
		t.Fatal(err)
	}
	if d.nc, err = nats.Connect(d.url, opt, nats.CustomInboxPrefix(events.Operator.InboxPrefix())); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.nc.Close)
	d.cl = client.New(d.nc, 5*time.Second)
	waitFor(t, 20*time.Second, func() bool {
		_, err := d.cl.WithTimeout(time.Second).List(context.Background(), 0)
		return answered(err)
	})
	return d
}

// readBanner reads the URL and the operator's key from what dev prints.
func (d *dev) readBanner(t *testing.T, stdout interface{ Read([]byte) (int, error) }) {
	t.Helper()
	lines := make(chan string)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	nkey := regexp.MustCompile(`--nkey (\S+)`)
	deadline := time.After(30 * time.Second)
	for d.url == "" || d.nkey == "" {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("gantry dev ended before it was ready:\n%s", d.logs(t))
			}
			if u, found := strings.CutPrefix(strings.TrimSpace(l), "export NATS_URL="); found {
				d.url = u
			}
			if m := nkey.FindStringSubmatch(l); m != nil {
				d.nkey = m[1]
			}
		case <-deadline:
			t.Fatalf("gantry dev not ready after 30s:\n%s", d.logs(t))
		}
	}
	go func() {
		for range lines {
		}
	}()
}

// cli runs the gantry CLI against dev as the operator: exit code and
// combined output.
func (d *dev) cli(t *testing.T, args ...string) (int, string) {
	t.Helper()
	cmd := exec.Command(d.bin, append(args, "--server", d.url, "--nkey", d.nkey)...)
	cmd.Env = append(os.Environ(), "HOME="+d.dir, "XDG_RUNTIME_DIR="+d.dir)
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode(), string(out)
	}
	if err != nil {
		t.Fatal(err)
	}
	return 0, string(out)
}

// cliFile runs the CLI with c written to a file as its last argument.
func (d *dev) cliFile(t *testing.T, c *dag.Composition, args ...string) (int, string) {
	t.Helper()
	b, _ := json.Marshal(c)
	path := filepath.Join(t.TempDir(), c.Name+".json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return d.cli(t, append(args, path)...)
}

// submit submits c with gantry submit -q and returns the workflow id.
func (d *dev) submit(t *testing.T, c *dag.Composition) string {
	t.Helper()
	code, out := d.cliFile(t, c, "submit", "-q")
	if code != 0 {
		t.Fatalf("gantry submit: exit %d: %s", code, out)
	}
	return strings.TrimSpace(out)
}

// wait polls state.workflow until the workflow ends.
func (d *dev) wait(t *testing.T, id string, timeout time.Duration) *events.WorkflowDoc {
	t.Helper()
	var doc *events.WorkflowDoc
	waitFor(t, timeout, func() bool {
		w, err := d.cl.Status(context.Background(), id)
		if err != nil || !w.Status.Terminal() {
			return false
		}
		doc = w
		return true
	})
	return doc
}

func (d *dev) exited() bool {
	select {
	case <-d.done:
		return true
	default:
		return false
	}
}

// interrupt sends SIGINT and returns how long dev took to exit (failing
// the test past within, or on an exit code other than 0).
func (d *dev) interrupt(t *testing.T, within time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-d.done:
	case <-time.After(within):
		t.Fatalf("gantry dev still running %s after SIGINT", within)
	}
	if d.code != 0 {
		t.Errorf("gantry dev exited %d after SIGINT", d.code)
	}
	return time.Since(start)
}

func (d *dev) logs(t *testing.T) string {
	b, err := os.ReadFile(d.stderr)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// waitFor polls ok until it holds, failing the test after timeout.
func waitFor(t *testing.T, timeout time.Duration, ok func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("still waiting after %s", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func oneLine(s string) string { return strings.Join(strings.Fields(s), " ") }

// storageComposition: on each host, formulas in a chain, each of nodes
// nodes two at a time, each sleeping a little and then writing its marker
// line ("<name>:<formula>/<node>") to the host's marker file.
func storageComposition(name string, f *sshtest.Fleet, formulas, nodes int, sleep string) *dag.Composition {
	c := &dag.Composition{Name: name, Hosts: map[string]dag.Host{}}
	for hi, h := range f.Hosts {
		host := fmt.Sprintf("h%d", hi)
		c.Hosts[host] = dag.Host{Transport: dag.TransportSSH, Address: h.Addr, User: f.User}
		for fi := 0; fi < formulas; fi++ {
			fm := dag.Formula{ID: fmt.Sprintf("%s-f%d", host, fi), Server: host, MaxParallel: 2}
			if fi > 0 {
				fm.DependsOn = []dag.FormulaDep{{Formula: fmt.Sprintf("%s-f%d", host, fi-1)}}
			}
			for ni := 0; ni < nodes; ni++ {
				fm.Nodes = append(fm.Nodes, dag.Node{Name: fmt.Sprintf("n%d", ni), DependsOn: []string{},
					Run: fmt.Sprintf("sleep %s; echo %s:%s/n%d >> %s/markers", sleep, name, fm.ID, ni, h.Dir)})
			}
			c.Formulas = append(c.Formulas, fm)
		}
	}
	return c
}

var markerMu sync.Mutex

// countMarkers counts the marker lines of composition name on every host.
func countMarkers(t *testing.T, f *sshtest.Fleet, name string) int {
	markerMu.Lock()
	defer markerMu.Unlock()
	n := 0
	for _, h := range f.Hosts {
		for l, k := range markers(t, h) {
			if strings.HasPrefix(l, name+":") {
				n += k
			}
		}
	}
	return n
}

// checkMarkers fails the test unless every node of composition name ran
// exactly once on its host.
func checkMarkers(t *testing.T, f *sshtest.Fleet, name string, formulas, nodes int) {
	t.Helper()
	for hi, h := range f.Hosts {
		got := markers(t, h)
		for fi := 0; fi < formulas; fi++ {
			for ni := 0; ni < nodes; ni++ {
				line := fmt.Sprintf("%s:h%d-f%d/n%d", name, hi, fi, ni)
				if got[line] != 1 {
					t.Errorf("%s on host %d: ran %d times, want once", line, hi, got[line])
				}
			}
		}
	}
}
