package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/spf13/cobra"
)

func newInventoryCmd() *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "inventory PATH",
		Short: "Show the hosts, groups and variables gantry reads from an Ansible inventory",
		Long: `inventory reads an Ansible inventory as a composition's "inventory: PATH"
does: an INI, YAML or ansible-inventory --list JSON file, or a directory of
them, with the group_vars/ and host_vars/ beside it. It prints what gantry
understood: each host with its address, user, transport, jump host (via),
become user, key and variables (typed as Ansible types them), each group
with its hosts, the ansible_* variables gantry does not act on, and
warnings (a secret's value written in the inventory, an ansible-vault
value). Secrets are printed as ***. -o json prints {"hosts", "groups"} as a
composition writes them, with "vars", "ignored" and "warnings" (-o yaml
the same as YAML). It prints every problem with its file and line and
exits 1 when the inventory cannot be used, 3 when it cannot be read.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inv, err := composition.ReadInventoryFile(args[0])
			if err != nil {
				printProblems(cmd.ErrOrStderr(), args[0], err)
				if unreadable(err) {
					return &exitError{code: ExitProblem, err: fmt.Errorf("%s could not be read", args[0])}
				}
				return failed("")
			}
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, inventoryJSON(inv))
			}
			printWarnings(cmd.ErrOrStderr(), inv.Warnings)
			return printInventory(cmd.OutOrStdout(), inv)
		},
	}
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// inventoryOutput is what gantry inventory -o json prints.
type inventoryOutput struct {
	Hosts     map[string]dag.Host       `json:"hosts"`
	Groups    map[string]dag.Group      `json:"groups"`
	Vars      map[string]map[string]any `json:"vars"`
	Ignored   []composition.IgnoredVar  `json:"ignored"`
	IgnoredBy map[string][]string       `json:"ignored_by_host"`
	Warnings  []dag.Problem             `json:"warnings"`
}

func inventoryJSON(inv *composition.Inventory) inventoryOutput {
	out := inventoryOutput{Hosts: inv.Hosts, Groups: inv.Groups, Vars: inv.Shown(), Ignored: inv.IgnoredCounts(),
		IgnoredBy: inv.Ignored, Warnings: inv.Warnings}
	if out.Warnings == nil {
		out.Warnings = []dag.Problem{}
	}
	return out
}

// printWarnings prints each warning as "file:line: path: warning: ...".
func printWarnings(w io.Writer, ws []dag.Problem) {
	for _, p := range ws {
		loc := p.File
		if p.Line > 0 {
			loc = fmt.Sprintf("%s:%d", loc, p.Line)
		}
		if p.Path != "" {
			loc += ": " + p.Path
		}
		linef(w, "%s: warning: %s", loc, p.Message)
	}
}

// printInventory prints the hosts, groups and ignored variables of an
// inventory as tables, what it says (addresses, users, variables) with
// control characters shown escaped.
func printInventory(w io.Writer, inv *composition.Inventory) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tUSER\tTRANSPORT\tVIA\tBECOME\tKEY\tVARS")
	shown := inv.Shown()
	for _, name := range sortedNames(inv.Hosts) {
		h := inv.Hosts[name]
		tr := h.Transport
		if tr == "" {
			tr = dag.TransportSSH
		}
		row(tw, name, dash(h.Address), dash(h.User), string(tr), dash(h.Via), becomeText(h), dash(h.IdentityFile), dash(hostVarsText(shown[name])))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(inv.Groups) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "GROUP\tHOSTS")
		for _, name := range sortedNames(inv.Groups) {
			row(tw, name, strings.Join(inv.Groups[name].Hosts, ", "))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	if ignored := inv.IgnoredCounts(); len(ignored) > 0 {
		fmt.Fprintln(w)
		fmt.Fprintln(tw, "IGNORED (gantry does not act on these)\tHOSTS")
		for _, v := range ignored {
			row(tw, v.Name, strconv.Itoa(v.Hosts))
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	_, err := fmt.Fprintf(w, "%d host(s), %d group(s), %d warning(s)\n", len(inv.Hosts), len(inv.Groups), len(inv.Warnings))
	return err
}

// becomeText is whom a host's commands run as through sudo, or -.
func becomeText(h dag.Host) string {
	switch {
	case !h.Become:
		return "-"
	case h.BecomeUser != "":
		return h.BecomeUser
	}
	return "root"
}

// hostVarsText writes a host's variables but ansible_* ones, name=value,
// sorted: text as a word or quoted, anything else as JSON.
func hostVarsText(vars map[string]any) string {
	names := make([]string, 0, len(vars))
	for k := range vars {
		if !strings.HasPrefix(k, "ansible_") {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	parts := make([]string, 0, len(names))
	for _, k := range names {
		v := vars[k]
		s, ok := v.(string)
		if ok {
			s = shellish(s)
		} else {
			var b strings.Builder
			e := json.NewEncoder(&b)
			e.SetEscapeHTML(false)
			_ = e.Encode(v)
			s = strings.TrimSuffix(b.String(), "\n")
		}
		parts = append(parts, k+"="+s)
	}
	return strings.Join(parts, " ")
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// shellish quotes a value that would not read as one word.
func shellish(s string) string {
	if s == "" || strings.ContainsAny(s, " \t\r\n\"'=") || !strconv.CanBackquote(s) {
		return strconv.Quote(s)
	}
	return s
}
