package cli

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/cmd/gantry/internal/hostpattern"
	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/spf13/cobra"
)

// What gantry exec builds: a group of the matched hosts, and a formula
// fanned out over it (an instance "exec-<host>" per host, each with its
// own node, state, output and host lock) whose one node runs the command.
const (
	execGroup   = "exec"
	execFormula = "exec"
	execNode    = "command"
	// execHostEnv names the host the command runs on, in its environment.
	execHostEnv = "GANTRY_HOST"
)

// execOptions are gantry exec's flags.
type execOptions struct {
	become     bool
	becomeSet  bool // --become given, true or false
	becomeUser string
	limit      string
	forks      int
	timeout    time.Duration
	output     string
	vars       *varFlags
}

func newExecCmd() *cobra.Command {
	var cf connFlags
	var o execOptions
	cmd := &cobra.Command{
		Use:   "exec INVENTORY PATTERN -- COMMAND",
		Short: "Run one command on every host a pattern matches, as a workflow",
		Long: `exec runs COMMAND on every host of INVENTORY that PATTERN matches, as a
workflow of its own (an id, events, logs, gantry status and gantry list, the
submitter recorded, as gantry submit), and prints each host's output when its
command ends, under a header "== HOST (exit N, 1.2s) ==", then a summary
("5 hosts: 4 ok, 1 failed").

INVENTORY is an Ansible inventory, as gantry inventory reads it, or a
composition file, whose hosts and groups (or its inventory:) are used.
PATTERN is an Ansible host pattern: a host, a group, all, a glob (web*), a
regular expression (~web-[0-9]+), or several of them separated by ':' or
',': web:db (either), web:&prod (both), web:!web-3 (but not). A part that
matches no host is an error naming it and listing the groups (exit 2).

COMMAND is the words after --, joined with spaces as ssh does, and run by
/bin/sh on each host: quote it once for the host's shell
(gantry exec hosts.ini web -- 'echo $HOME'). It is text, not a template:
{{ }} reaches the host as written. $GANTRY_HOST is the host's name in the
inventory. Each run runs the command again (nothing is skipped as already
done), and a failing host does not stop the others.

--become runs it through sudo -n (as --become-user, root by default);
--become=false runs it as the login user even on hosts that become.
--limit is another pattern the hosts must also match. --forks N runs it on
at most N hosts at once (across executors); by default, on as many as the
executors take. --timeout bounds each host's command (default 30m).
-o json prints one JSON document at the end: the workflow id and, per host,
its status, exit_code, duration (seconds), stdout, stderr and output lines.

Exit status: 0 when it succeeded on every host, 1 when it failed on any (or
the inventory has problems), 2 for a usage error (a pattern that matches no
host), 3 when the inventory cannot be read or the server reached, 130 on
Ctrl-C, which cancels the workflow (its running commands are killed on
the hosts) and prints what the hosts said so far.`,
		Args: execArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			o.becomeSet = cmd.Flags().Changed("become")
			if err := o.check(); err != nil {
				return err
			}
			ex, err := prepareExec(cmd.ErrOrStderr(), args, o)
			if err != nil {
				return err
			}
			return runExec(cmd, cf, ex, o.output)
		},
	}
	cf.addConn(cmd)
	f := cmd.Flags()
	f.BoolVarP(&o.become, "become", "b", false, "run the command through sudo -n (--become=false: as the login user, whatever the hosts say)")
	f.StringVar(&o.becomeUser, "become-user", "", "whom --become runs the command as (default root)")
	f.StringVarP(&o.limit, "limit", "l", "", "a host pattern the hosts must match too")
	f.IntVarP(&o.forks, "forks", "f", 0, "run on at most this many hosts at once (0: no limit)")
	f.DurationVar(&o.timeout, "timeout", 0, "kill a host's command after this long (default 30m)")
	outputFlag(cmd, &o.output, "text", "json")
	o.vars = addVarFlags(cmd)
	return cmd
}

// execArgs wants INVENTORY PATTERN -- COMMAND.
func execArgs(cmd *cobra.Command, args []string) error {
	dash := cmd.ArgsLenAtDash()
	switch {
	case dash < 0 && len(args) > 2:
		return &exitError{code: ExitUsage, err: errors.New("exec: put the command after --: gantry exec INVENTORY PATTERN -- COMMAND")}
	case dash != 2 || len(args) < 3:
		return &exitError{code: ExitUsage, err: errors.New("exec wants INVENTORY PATTERN -- COMMAND")}
	case strings.TrimSpace(strings.Join(args[2:], " ")) == "":
		return &exitError{code: ExitUsage, err: errors.New("exec: the command after -- is empty")}
	}
	return nil
}

func (o execOptions) check() error {
	if o.forks < 0 || o.forks > dag.MaxLimit {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--forks %d: give 1-%d hosts at once (0: no limit)", o.forks, dag.MaxLimit)}
	}
	if o.timeout < 0 {
		return &exitError{code: ExitUsage, err: fmt.Errorf("--timeout %s: give a duration above 0", o.timeout)}
	}
	return nil
}

// execRun is an exec ready to send: its composition as sent, and which
// host each instance of its formula runs on.
type execRun struct {
	name    string
	command string
	data    []byte
	hosts   []string          // the matched hosts, sorted
	byID    map[string]string // instance (formula id) -> host
}

// prepareExec reads the inventory, selects the hosts and builds the
// composition, checked as the planner will check it.
func prepareExec(stderr io.Writer, args []string, o execOptions) (*execRun, error) {
	command := strings.Join(args[2:], " ")
	fleet, err := readFleet(stderr, args[0])
	if err != nil {
		return nil, err
	}
	hosts, err := selectHosts(fleet, args[1], o.limit)
	if err != nil {
		return nil, err
	}
	c := buildExec(fleet, hosts, o, execKey{pattern: args[1], command: command})
	if err := o.applyFlags(c); err != nil {
		return nil, err
	}
	return checkExec(stderr, c, command)
}

// applyFlags puts into the composition exec builds what the command line
// says of it beyond the command, before it is checked and sent.
func (o execOptions) applyFlags(c *dag.Composition) error {
	return o.vars.applyTo(c)
}

// fleet is what exec takes of an inventory or a composition.
type fleet struct {
	Hosts  map[string]dag.Host
	Groups map[string]dag.Group
	Vars   map[string]string
}

// readFleet reads the hosts and groups of an Ansible inventory (a file or
// a directory) or of a composition (a document with formulas). Problems
// are printed with their file and line (exit 1), and so are the
// inventory's warnings; a file that cannot be read is exit 3.
func readFleet(stderr io.Writer, path string) (*fleet, error) {
	isComp, err := isCompositionFile(path)
	if err != nil {
		return nil, &exitError{code: ExitProblem, err: err}
	}
	if isComp {
		c, err := composition.LoadFileWarn(path, warnTo(stderr))
		if err != nil {
			return nil, fleetProblem(stderr, path, err)
		}
		return &fleet{Hosts: c.Hosts, Groups: c.Groups, Vars: c.Vars}, nil
	}
	inv, err := composition.ReadInventoryFile(path)
	if err != nil {
		return nil, fleetProblem(stderr, path, err)
	}
	printWarnings(stderr, inv.Warnings)
	return &fleet{Hosts: inv.Hosts, Groups: inv.Groups}, nil
}

func fleetProblem(stderr io.Writer, path string, err error) error {
	var bad *dag.InvalidError
	if !errors.As(err, &bad) {
		return &exitError{code: ExitProblem, err: err}
	}
	printProblems(stderr, path, err)
	return failed("%s: %d problem(s); nothing was run", path, len(bad.Problems))
}

// isCompositionFile says whether path holds a composition (a mapping with
// formulas) rather than an inventory.
func isCompositionFile(path string) (bool, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return false, fmt.Errorf("read inventory: %w", err)
	}
	if fi.IsDir() {
		return false, nil
	}
	data, err := composition.ReadFile(path)
	if err != nil {
		return false, err
	}
	root, err := composition.Parse(path, data)
	return err == nil && root.Kind == dag.KindMap && root.Get("formulas") != nil, nil
}

// selectHosts is the hosts pattern matches, and limit too when given. A
// pattern that does not parse or matches nothing is a usage error.
func selectHosts(f *fleet, pattern, limit string) ([]string, error) {
	inv := hostpattern.Inventory{Hosts: sortedNames(f.Hosts), Groups: groupMembers(f)}
	hosts, err := matchPattern(inv, pattern, "host pattern")
	if err != nil {
		return nil, err
	}
	if limit != "" {
		lim, err := matchPattern(inv, limit, "--limit")
		if err != nil {
			return nil, err
		}
		hosts = slices.DeleteFunc(hosts, func(h string) bool { return !slices.Contains(lim, h) })
		if len(hosts) == 0 {
			return nil, &exitError{code: ExitUsage, err: fmt.Errorf("--limit %q leaves none of the hosts %q matches: nothing to run", limit, pattern)}
		}
	}
	return hosts, nil
}

func matchPattern(inv hostpattern.Inventory, pattern, what string) ([]string, error) {
	p, err := hostpattern.Parse(pattern)
	if err == nil {
		var hosts []string
		if hosts, err = p.Match(inv); err == nil && len(hosts) == 0 {
			err = fmt.Errorf("%q matches no host", pattern)
		}
		if err == nil {
			return hosts, nil
		}
	}
	return nil, &exitError{code: ExitUsage, err: fmt.Errorf("%s: %w: nothing to run", what, err)}
}

// groupMembers lists each group's hosts: those it names, or those with
// its labels.
func groupMembers(f *fleet) map[string][]string {
	out := make(map[string][]string, len(f.Groups))
	for name, g := range f.Groups {
		if len(g.Labels) == 0 {
			out[name] = g.Hosts
			continue
		}
		for _, h := range sortedNames(f.Hosts) {
			if labelsHave(f.Hosts[h].Labels, g.Labels) {
				out[name] = append(out[name], h)
			}
		}
	}
	return out
}

func labelsHave(have, want map[string]string) bool {
	for k, v := range want {
		if hv, ok := have[k]; !ok || hv != v {
			return false
		}
	}
	return true
}

// execKey is what names an exec's composition.
type execKey struct{ pattern, command string }

// buildExec makes the composition of an exec: the matched hosts (with
// the jump hosts they are reached through) in one group, and a formula
// fanned out over it whose node runs the command. It always runs (reset:
// nothing is skipped as done before) and a failing host does not stop
// the others (on_failure: continue); --forks is a limit on the group.
func buildExec(f *fleet, hosts []string, o execOptions, k execKey) *dag.Composition {
	c := &dag.Composition{
		Name:      execName(k, o),
		Hosts:     withJumpHosts(f.Hosts, hosts),
		Vars:      f.Vars,
		Groups:    map[string]dag.Group{execGroup: {Hosts: hosts}},
		Reset:     true,
		OnFailure: dag.OnFailureContinue,
		Formulas:  []dag.Formula{{ID: execFormula, Group: execGroup, Nodes: []dag.Node{o.node(k.command)}}},
	}
	if o.forks > 0 {
		c.Limits = []dag.Limit{{Group: execGroup, MaxParallel: o.forks}}
	}
	return c
}

// node is the exec's one node.
func (o execOptions) node(command string) dag.Node {
	n := dag.Node{
		Name:       execNode,
		Run:        literal(command),
		DependsOn:  []string{},
		Timeout:    dag.Duration(o.timeout),
		Env:        map[string]dag.EnvValue{execHostEnv: dag.Text("{{ .Host }}")},
		BecomeUser: o.becomeUser,
	}
	if o.becomeSet {
		n.Become = &o.become
	}
	return n
}

// literal is text as a template that renders as the text itself: a
// node's commands are templates over its host, an exec's command is not.
func literal(text string) string {
	return strings.ReplaceAll(text, "{{", `{{"{{"}}`)
}

// execName names an exec's composition after what it runs where, so that
// gantry list tells execs apart and the same exec shares its host locks.
func execName(k execKey, o execOptions) string {
	sum := sha256.Sum256([]byte(strings.Join([]string{k.pattern, o.limit, k.command, fmt.Sprint(o.becomeSet, o.become), o.becomeUser}, "\x00")))
	return "exec-" + hex.EncodeToString(sum[:6])
}

// withJumpHosts is the named hosts and every jump host on their way.
func withJumpHosts(all map[string]dag.Host, names []string) map[string]dag.Host {
	out := make(map[string]dag.Host, len(names))
	for _, n := range names {
		for step := 0; n != "" && step <= len(all); step++ { // a via cycle ends here; validation names it
			h, ok := all[n]
			if _, done := out[n]; done || !ok {
				break
			}
			out[n] = h
			n = h.Via
		}
	}
	return out
}

// checkExec loads the composition as the planner will, so that its
// problems are printed here, and maps each instance to its host.
func checkExec(stderr io.Writer, c *dag.Composition, command string) (*execRun, error) {
	data, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	loaded, err := composition.Load("exec.json", data)
	if err != nil {
		var bad *dag.InvalidError
		if errors.As(err, &bad) {
			printProblems(stderr, "exec", err)
			return nil, failed("exec: %d problem(s) with the hosts or the command; nothing was run", len(bad.Problems))
		}
		return nil, err
	}
	run := &execRun{name: c.Name, command: command, data: data, hosts: c.Groups[execGroup].Hosts, byID: map[string]string{}}
	for _, f := range loaded.Formulas {
		if f.Instance != nil && f.Instance.Of == execFormula {
			run.byID[f.ID] = f.Server
		}
	}
	return run, nil
}
