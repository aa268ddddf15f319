package cli

import (
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
		Use:   "inventory FILE",
		Short: "Show the hosts and groups gantry reads from an Ansible YAML inventory",
		Long: `inventory reads an Ansible YAML inventory (all: hosts, vars, children) as
a composition's "inventory: FILE" does, and prints what gantry understood:
each host with its address, user, transport, jump host (via) and variables,
and each group with its hosts. -o json prints {"hosts": ..., "groups": ...}
as a composition writes them. It prints every problem with its file and line
and exits 1 when the inventory cannot be used.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			inv, err := composition.ReadInventoryFile(args[0])
			if err != nil {
				printProblems(cmd.ErrOrStderr(), args[0], err)
				return failed("")
			}
			if output == "json" {
				return printJSON(cmd.OutOrStdout(), inv)
			}
			return printInventory(cmd.OutOrStdout(), inv)
		},
	}
	outputFlag(cmd, &output, "table", "json")
	return cmd
}

// printInventory prints the hosts and groups of an inventory as tables,
// what it says (addresses, users, variables) with control characters
// shown escaped.
func printInventory(w io.Writer, inv *composition.Inventory) error {
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOST\tADDRESS\tUSER\tTRANSPORT\tVIA\tVARS")
	for _, name := range sortedNames(inv.Hosts) {
		h := inv.Hosts[name]
		vars := make([]string, 0, len(h.Vars))
		for _, k := range sortedNames(h.Vars) {
			vars = append(vars, k+"="+shellish(h.Vars[k]))
		}
		tr := h.Transport
		if tr == "" {
			tr = dag.TransportSSH
		}
		row(tw, name, dash(h.Address), dash(h.User), string(tr), dash(h.Via), dash(strings.Join(vars, " ")))
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
	_, err := fmt.Fprintf(w, "%d host(s), %d group(s)\n", len(inv.Hosts), len(inv.Groups))
	return err
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
