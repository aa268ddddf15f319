package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/events"
)

// execFleet is a stack with 5 sshd hosts and an Ansible INI inventory
// naming them h-1..h-5 (group web: h-1..h-3, group db: h-4, h-5).
func execFleet(t *testing.T) (*stack, string) {
	s := newStack(t, stackOptions{hosts: 5})
	var b strings.Builder
	for _, g := range []struct {
		name  string
		hosts []int
	}{{"web", []int{0, 1, 2}}, {"db", []int{3, 4}}} {
		fmt.Fprintf(&b, "[%s]\n", g.name)
		for _, i := range g.hosts {
			h := s.fleet.Hosts[i]
			port := h.Addr[strings.LastIndexByte(h.Addr, ':')+1:]
			fmt.Fprintf(&b, "h-%d ansible_host=127.0.0.1 ansible_port=%s ansible_user=%s\n", i+1, port, s.fleet.User)
		}
	}
	inv := filepath.Join(t.TempDir(), "hosts.ini")
	if err := os.WriteFile(inv, []byte(b.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	return s, inv
}

// execCmd is gantry exec as an operator: flags go before the "--".
func (s *stack) execCmd(bin string, args []string, command string) *exec.Cmd {
	return s.execAs(events.Operator, bin, args, command)
}

func (s *stack) execAs(id events.Identity, bin string, args []string, command string) *exec.Cmd {
	a := append([]string{"exec"}, args...)
	a = append(a, "--server", s.ns.URL(), "--nkey", s.ns.Keys.SeedFile(id), "--", command)
	return exec.Command(bin, a...)
}

func (s *stack) runExec(t *testing.T, bin string, args []string, command string) (int, string, string) {
	t.Helper()
	return runCmd(t, s.execCmd(bin, args, command))
}

func runCmd(t *testing.T, cmd *exec.Cmd) (int, string, string) {
	t.Helper()
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	code := exitOf(t, cmd.Run())
	return code, out.String(), errOut.String()
}

// hostBlocks cuts exec's output into each host's header and lines.
func hostBlocks(out string) (map[string][]string, []string) {
	blocks := map[string][]string{}
	var order []string
	var cur string
	header := regexp.MustCompile(`^== (\S+) \((.*)\) ==$`)
	summary := regexp.MustCompile(`^\d+ hosts?: \d+ ok, `)
	for _, l := range strings.Split(strings.TrimRight(out, "\n"), "\n") {
		if summary.MatchString(l) {
			break
		}
		if m := header.FindStringSubmatch(l); m != nil {
			cur = m[1]
			order = append(order, cur)
			blocks[cur] = []string{m[2]}
			continue
		}
		if cur != "" {
			blocks[cur] = append(blocks[cur], l)
		}
	}
	return blocks, order
}

// gantry exec runs a command on every host a pattern matches, as a
// workflow: each host's output under its own header when its command
// ends, a summary, exit 1 when a host failed; the workflow is in gantry
// list; -o json has each host's result; a pattern that matches nothing is
// a usage error naming it and the groups; a viewer may not exec.
func TestCLIExec(t *testing.T) {
	s, inv := execFleet(t)
	bin := buildGantry(t)
	command := `echo "out of $GANTRY_HOST"; echo "err of $GANTRY_HOST" >&2; echo '{{ .Host }}'; [ "$GANTRY_HOST" != h-3 ] || exit 3`
	code, out, errOut := s.runExec(t, bin, []string{inv, "all"}, command)
	t.Logf("gantry exec %s all:\n%s\nstderr:\n%s", inv, out, errOut)
	if code != 1 {
		t.Fatalf("exit %d, want 1 (h-3 failed)", code)
	}
	blocks, order := hostBlocks(out)
	if len(order) != 5 {
		t.Fatalf("%d host blocks, want 5: %v", len(order), order)
	}
	for i := 1; i <= 5; i++ {
		h := fmt.Sprintf("h-%d", i)
		b := blocks[h]
		exit := "exit 0, "
		if h == "h-3" {
			exit = "exit 3, "
		}
		if len(b) != 4 || !strings.HasPrefix(b[0], exit) || !regexp.MustCompile(`, \d+\.\d\d?s$`).MatchString(b[0]) {
			t.Errorf("%s: block %q", h, b)
			continue
		}
		got := b[1:]
		sort.Strings(got) // stdout and stderr lines come in the order printed, which pipes may reorder
		want := []string{"err of " + h, "out of " + h, "{{ .Host }}"}
		if strings.Join(got, "|") != strings.Join(want, "|") {
			t.Errorf("%s: lines %q, want %q", h, got, want)
		}
	}
	if !strings.HasSuffix(out, "\n5 hosts: 4 ok, 1 failed\n") {
		t.Errorf("summary missing:\n%s", out)
	}
	m := regexp.MustCompile(`gantry: workflow (\S+) \((exec-[0-9a-f]{12})\) on 5 host\(s\)`).FindStringSubmatch(errOut)
	if m == nil {
		t.Fatalf("stderr does not name the workflow:\n%s", errOut)
	}
	list, err := s.gantryCmd(bin, events.Viewer, "list").CombinedOutput()
	if err != nil || !strings.Contains(string(list), m[1]) || !strings.Contains(string(list), m[2]) {
		t.Errorf("gantry list does not show %s %s: %v\n%s", m[1], m[2], err, list)
	}

	// -o json, a union with an exclusion, and a literal template; the
	// same exec twice runs twice (nothing is skipped as done).
	for range 2 {
		execJSON(t, s, bin, inv)
	}

	// An exec is a submit: a viewer may not.
	code, out, errOut = runCmd(t, s.execAs(events.Viewer, bin, []string{inv, "all"}, "true"))
	if code != 3 || out != "" || !strings.Contains(errOut, "this command is for operators: not allowed for this identity") {
		t.Errorf("a viewer's exec: exit %d\n%s\n%s", code, out, errOut)
	}

	// A pattern that matches nothing: exit 2, nothing submitted.
	code, out, errOut = s.runExec(t, bin, []string{inv, "web:dbs"}, "true")
	if code != 2 || out != "" || !strings.Contains(errOut, `gantry: host pattern: "dbs" matches no host or group of the inventory (its groups: db, web; it has 5 host(s)): nothing to run`) {
		t.Errorf("a pattern matching nothing: exit %d\n%s\n%s", code, out, errOut)
	}
}

func execJSON(t *testing.T, s *stack, bin, inv string) {
	code, out, errOut := s.runExec(t, bin, []string{inv, "web:db:!h-5", "-o", "json"}, `echo "{{ .Host }} $GANTRY_HOST"`)
	var doc struct {
		WorkflowID string `json:"workflow_id"`
		Status     string `json:"status"`
		Hosts      []struct {
			Host     string  `json:"host"`
			Status   string  `json:"status"`
			ExitCode *int    `json:"exit_code"`
			Duration float64 `json:"duration"`
			Stdout   string  `json:"stdout"`
			Output   []struct{ Stream, Line string }
		} `json:"hosts"`
		Summary struct{ Hosts, OK, Failed int } `json:"summary"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
		t.Fatalf("-o json: exit %d, %v\n%s\nstderr:\n%s", code, err, out, errOut)
	}
	if doc.Status != "succeeded" || doc.WorkflowID == "" || len(doc.Hosts) != 4 || doc.Summary.Hosts != 4 || doc.Summary.OK != 4 {
		t.Fatalf("-o json: %+v", doc)
	}
	var hosts []string
	for _, h := range doc.Hosts {
		hosts = append(hosts, h.Host)
		if h.Status != "succeeded" || h.ExitCode == nil || *h.ExitCode != 0 || h.Duration < 0 || h.Stdout != "{{ .Host }} "+h.Host+"\n" ||
			len(h.Output) != 1 || h.Output[0].Stream != "stdout" {
			t.Errorf("-o json host %+v", h)
		}
	}
	sort.Strings(hosts)
	if strings.Join(hosts, " ") != "h-1 h-2 h-3 h-4" {
		t.Errorf("-o json hosts %v", hosts)
	}
}

// --forks 2 runs the command on at most 2 hosts at once: each host writes
// when its command starts and ends.
func TestCLIExecForks(t *testing.T) {
	s, inv := execFleet(t)
	bin := buildGantry(t)
	dir := t.TempDir()
	command := fmt.Sprintf(`echo "start $(date +%%s%%N)" >> %[1]s/$GANTRY_HOST; sleep 1; echo "end $(date +%%s%%N)" >> %[1]s/$GANTRY_HOST`, dir)
	code, out, errOut := s.runExec(t, bin, []string{inv, "all", "--forks", "2"}, command)
	if code != 0 || !strings.Contains(out, "5 hosts: 5 ok, 0 failed") {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	type mark struct {
		at    int64
		delta int
	}
	var marks []mark
	for i := 1; i <= 5; i++ {
		b, err := os.ReadFile(filepath.Join(dir, fmt.Sprintf("h-%d", i)))
		if err != nil {
			t.Fatal(err)
		}
		for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
			what, ns, _ := strings.Cut(l, " ")
			at, err := strconv.ParseInt(ns, 10, 64)
			if err != nil {
				t.Fatalf("h-%d: %q", i, l)
			}
			marks = append(marks, mark{at, map[string]int{"start": 1, "end": -1}[what]})
		}
	}
	if len(marks) != 10 {
		t.Fatalf("%d marks, want a start and an end on each of 5 hosts", len(marks))
	}
	sort.Slice(marks, func(i, j int) bool { // an end before a start at the same instant
		return marks[i].at < marks[j].at || marks[i].at == marks[j].at && marks[i].delta < marks[j].delta
	})
	running, most := 0, 0
	for _, m := range marks {
		running += m.delta
		most = max(most, running)
	}
	t.Logf("at most %d host(s) ran the command at once", most)
	if most > 2 || most < 1 {
		t.Fatalf("%d hosts ran at once with --forks 2", most)
	}
}

// Interrupting gantry exec (Ctrl-C, and SIGTERM or SIGHUP as CI jobs,
// systemd, timeout(1) or a closed terminal send them) cancels its
// workflow: the commands are killed on the hosts, each host is printed
// cancelled with what it printed, and gantry exits 130. Before, SIGTERM
// and SIGHUP ended gantry at once and left the commands running.
func TestCLIExecInterrupted(t *testing.T) {
	s, inv := execFleet(t)
	bin := buildGantry(t)
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		t.Run(sig.String(), func(t *testing.T) { execInterrupted(t, s, bin, inv, sig) })
	}
}

func execInterrupted(t *testing.T, s *stack, bin, inv string, sig syscall.Signal) {
	dir := t.TempDir()
	// The sleep's own argument marks the commands in the hosts' process
	// lists (pgrep -f sees a process's arguments, not its shell's script).
	sleep := fmt.Sprintf("60.%06d", time.Now().UnixNano()%1000000)
	cmd := s.execCmd(bin, []string{inv, "web"}, fmt.Sprintf("echo started; touch %s/$GANTRY_HOST; sleep %s; echo done", dir, sleep))
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	var id string
	re := regexp.MustCompile(`gantry: workflow (\S+) `)
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if m := re.FindStringSubmatch(errOut.String()); m != nil {
			id = m[1]
			break
		}
	}
	if id == "" {
		cmd.Process.Kill()
		t.Fatalf("no workflow:\n%s", errOut.String())
	}
	s.waitFor("the commands to run on the hosts", 30*time.Second, func() bool {
		n, _ := filepath.Glob(filepath.Join(dir, "h-*"))
		return len(n) == 3
	})
	running := func() string {
		out, _ := exec.Command("pgrep", "-f", "sleep "+strings.ReplaceAll(sleep, ".", "[.]")).Output()
		return strings.TrimSpace(string(out))
	}
	if running() == "" {
		t.Fatal("pgrep finds no command on the hosts: the check below could not fail")
	}
	// A command's output streams once it has run 150 ms (before, it comes
	// with its result, which a killed command has not).
	s.waitFor("the commands' output to stream", 30*time.Second, func() bool {
		logs, _ := s.gantryCmd(bin, events.Viewer, "logs", id).Output()
		return strings.Count(string(logs), " stdout started\n") == 3
	})
	start := time.Now()
	cmd.Process.Signal(sig)
	code := exitOf(t, cmd.Wait())
	t.Logf("exit %d after %s\nstdout:\n%s\nstderr:\n%s", code, time.Since(start), out.String(), errOut.String())
	blocks, _ := hostBlocks(out.String())
	if code != 130 || len(blocks) != 3 || !strings.Contains(errOut.String(), "cancelling workflow "+id) ||
		!strings.Contains(out.String(), "3 hosts: 0 ok, 0 failed, 3 cancelled") {
		t.Fatalf("exit %d, %d host blocks", code, len(blocks))
	}
	for h, b := range blocks {
		if !strings.HasPrefix(b[0], "cancelled, ") || len(b) < 2 || b[1] != "started" {
			t.Errorf("%s: %q", h, b)
		}
	}
	if st := s.status(id).Status; st != dag.WorkflowCancelled {
		t.Errorf("workflow %s", st)
	}
	s.waitFor("no command left on the hosts", 10*time.Second, func() bool { return running() == "" })
}

// gantry exec --become runs the command through sudo -n; --become=false
// runs it as the login user on a host that becomes. The hosts come from a
// composition file (one logs in with its identity_file).
func TestCLIExecBecome(t *testing.T) {
	b := newBecomeSetup(t)
	bin := buildGantry(t)
	addr := b.s.fleet.Hosts[0].Addr
	comp := filepath.Join(t.TempDir(), "fleet.yaml")
	doc := fmt.Sprintf(`name: fleet
hosts:
  plain: {address: "%[1]s", user: %[2]s, identity_file: %[3]s}
  root: {address: "%[1]s", user: %[2]s, identity_file: %[3]s, become: true}
formulas: [{id: x, server: plain, nodes: [{name: n, run: "true"}]}]
`, addr, b.login, b.key)
	if err := os.WriteFile(comp, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		want  string // plain's user, root's
	}{
		{nil, b.login + " root"},
		{[]string{"--become"}, "root root"},
		{[]string{"--become=false"}, b.login + " " + b.login},
	} {
		code, out, errOut := b.s.runExec(t, bin, append([]string{comp, "all", "-o", "json"}, tc.flags...), "id -un")
		var doc struct {
			Hosts []struct{ Host, Stdout string } `json:"hosts"`
		}
		if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 {
			t.Fatalf("%v: exit %d %v\n%s\n%s", tc.flags, code, err, out, errOut)
		}
		users := map[string]string{}
		for _, h := range doc.Hosts {
			users[h.Host] = strings.TrimSpace(h.Stdout)
		}
		if got := users["plain"] + " " + users["root"]; got != tc.want {
			t.Errorf("%v: users %q, want %q", tc.flags, got, tc.want)
		}
	}
}

// Every line a host printed is in gantry exec's output, or counted as left
// out, or the host says its last lines had not come: none is lost without
// a word. Before, a host's lines got 2 s after its end to come, and
// 100,000 lines on 3 hosts lost their last tens of thousands silently
// (exit 0), while gantry logs had them all.
func TestCLIExecPrintsEveryLine(t *testing.T) {
	const lines = 100000
	s, inv := execFleet(t)
	bin := buildGantry(t)
	code, out, errOut := s.runExec(t, bin, []string{inv, "web", "-o", "json"}, fmt.Sprint("seq 1 ", lines))
	var doc struct {
		Hosts []struct {
			Host       string `json:"host"`
			Stdout     string `json:"stdout"`
			LeftOut    int    `json:"lines_left_out"`
			Incomplete bool   `json:"output_incomplete"`
		} `json:"hosts"`
	}
	if err := json.Unmarshal([]byte(out), &doc); err != nil || code != 0 || len(doc.Hosts) != 3 {
		t.Fatalf("exit %d, %v: %s", code, err, errOut)
	}
	for _, h := range doc.Hosts {
		n := strings.Count(h.Stdout, "\n")
		if n+h.LeftOut != lines && !h.Incomplete {
			t.Errorf("%s: %d lines, %d left out, of %d: %d lost without a word", h.Host, n, h.LeftOut, lines, lines-n-h.LeftOut)
		}
		if n+h.LeftOut == lines && !strings.HasSuffix(h.Stdout, fmt.Sprintf("\n%d\n", lines)) {
			t.Errorf("%s: its output does not end with its last line: %q", h.Host, h.Stdout[max(0, len(h.Stdout)-40):])
		}
	}
}

// With no executor to take its work, gantry exec says why nothing starts
// (the planner reports the work unclaimed), instead of waiting without a
// word.
func TestCLIExecSaysWhyNothingStarts(t *testing.T) {
	s := newStack(t, stackOptions{unclaimedAfter: time.Second})
	bin := buildGantry(t)
	comp := filepath.Join(t.TempDir(), "fleet.yaml")
	if err := os.WriteFile(comp, []byte(`name: fleet
hosts:
  far: {transport: local, labels: {zone: nowhere}}
formulas: [{id: x, server: far, nodes: [{name: n, run: "true"}]}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := s.execCmd(bin, []string{comp, "all"}, "echo hi")
	var out, errOut syncBuffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { cmd.Process.Signal(syscall.SIGINT); cmd.Wait() }()
	s.waitFor("gantry exec to say why nothing starts", 20*time.Second, func() bool {
		return strings.Contains(errOut.String(), "gantry: far (and any other host held back so) waits: no executor")
	})
}
