package cli

import (
	"context"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

// Shell completion (gantry completion bash|zsh|fish|powershell) offers,
// besides commands and flags, what the server knows: workflow ids (from
// the state-store's list), a workflow's formulas, nodes and hosts, and the
// hosts the state-store records. It asks with the command's own
// connection flags, and gives up quietly (offering nothing) when no server
// answers within completionTimeout.

// completionTimeout bounds each question a completion asks the server.
const completionTimeout = 2 * time.Second

// completionListLimit is how many workflows (newest first) a completion
// offers ids of.
const completionListLimit = 200

// completionConn connects with the command's connection flags, or says
// it cannot.
func (c *connFlags) completionConn() (*client.Client, bool) {
	cl, err := c.connect()
	if err != nil {
		return nil, false
	}
	return cl.WithTimeout(completionTimeout), true
}

// completeWorkflowIDs offers the ids of the newest workflows that start
// with what is typed, each with its name and status, as the first
// argument.
func (c *connFlags) completeWorkflowIDs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	cl, ok := c.completionConn()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cl.Close()
	rows, err := cl.List(context.Background(), completionListLimit)
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var out []cobra.Completion
	for _, r := range rows {
		if strings.HasPrefix(r.WorkflowID, toComplete) {
			out = append(out, cobra.CompletionWithDesc(r.WorkflowID, r.Workflow+" "+string(r.Status)))
		}
	}
	return out, cobra.ShellCompDirectiveNoFileComp
}

// workflowDocFor reads the document of the workflow args[0] names (any
// unique prefix of its id), for a completion.
func (c *connFlags) workflowDocFor(args []string) (*events.WorkflowDoc, bool) {
	if len(args) == 0 {
		return nil, false
	}
	cl, ok := c.completionConn()
	if !ok {
		return nil, false
	}
	defer cl.Close()
	ctx := context.Background()
	id, err := resolveWorkflow(ctx, cl, args[0])
	if err != nil {
		return nil, false
	}
	doc, err := cl.Status(ctx, id)
	return doc, err == nil
}

// completeLogsArgs completes gantry logs: a workflow id, then one of its
// formulas or FORMULA/NODE.
func (c *connFlags) completeLogsArgs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return c.completeWorkflowIDs(cmd, args, toComplete)
	}
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	doc, ok := c.workflowDocFor(args)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := append(formulaNames(doc), nodeNames(doc)...)
	return prefixed(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeNodesOfArg completes --node FORMULA/NODE with the nodes of the
// workflow the first argument names.
func (c *connFlags) completeNodesOfArg(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	doc, ok := c.workflowDocFor(args)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return prefixed(nodeNames(doc), toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeWorkflowHosts completes --host with the hosts of the workflow
// the first argument names.
func (c *connFlags) completeWorkflowHosts(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	doc, ok := c.workflowDocFor(args)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return prefixed(hostNames(doc), toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeKnownHosts completes --host with every host the state-store
// records nodes of.
func (c *connFlags) completeKnownHosts(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	cl, ok := c.completionConn()
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer cl.Close()
	nodes, err := cl.Host(context.Background(), "")
	if err != nil {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	var hosts []string
	for _, n := range nodes {
		if !slices.Contains(hosts, n.Host) {
			hosts = append(hosts, n.Host)
		}
	}
	sort.Strings(hosts)
	return prefixed(hosts, toComplete), cobra.ShellCompDirectiveNoFileComp
}

func formulaNames(d *events.WorkflowDoc) []string {
	var out []string
	for id := range d.Formulas {
		out = append(out, id)
	}
	sort.Strings(out)
	return out
}

func nodeNames(d *events.WorkflowDoc) []string {
	var out []string
	for id, f := range d.Formulas {
		for n := range f.Nodes {
			out = append(out, id+"/"+n)
		}
	}
	sort.Strings(out)
	return out
}

func hostNames(d *events.WorkflowDoc) []string {
	var out []string
	for _, f := range d.Formulas {
		if f.Host != "" && !slices.Contains(out, f.Host) {
			out = append(out, f.Host)
		}
	}
	sort.Strings(out)
	return out
}

// prefixed is the names that start with what is typed.
func prefixed(names []string, toComplete string) []cobra.Completion {
	var out []cobra.Completion
	for _, n := range names {
		if strings.HasPrefix(n, toComplete) {
			out = append(out, n)
		}
	}
	return out
}
