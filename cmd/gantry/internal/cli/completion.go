package cli

import (
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
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

// connOf is each command's connection flags, for its completions.
var connOf sync.Map // *cobra.Command -> *connFlags

// completionConn connects with cmd's connection flags, or says it cannot.
func completionConn(cmd *cobra.Command) (*nats.Conn, bool) {
	v, ok := connOf.Load(cmd)
	if !ok {
		return nil, false
	}
	nc, err := v.(*connFlags).connect()
	return nc, err == nil
}

// completeWorkflowIDs offers the ids of the newest workflows that start
// with what is typed, each with its name and status, as the first
// argument.
func completeWorkflowIDs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) > 0 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	nc, ok := completionConn(cmd)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer nc.Close()
	var rows []events.WorkflowSummary
	if request(nc, events.StateList, mustJSON(events.ListQuery{Limit: completionListLimit}), completionTimeout, &rows) != nil {
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
func workflowDocFor(cmd *cobra.Command, args []string) (*events.WorkflowDoc, bool) {
	if len(args) == 0 {
		return nil, false
	}
	nc, ok := completionConn(cmd)
	if !ok {
		return nil, false
	}
	defer nc.Close()
	id, err := resolveWorkflow(nc, args[0], completionTimeout)
	if err != nil {
		return nil, false
	}
	var doc events.WorkflowDoc
	if request(nc, events.StateWorkflow, mustJSON(events.WorkflowQuery{WorkflowID: id}), completionTimeout, &doc) != nil {
		return nil, false
	}
	return &doc, true
}

// completeLogsArgs completes gantry logs: a workflow id, then one of its
// formulas or FORMULA/NODE.
func completeLogsArgs(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	if len(args) == 0 {
		return completeWorkflowIDs(cmd, args, toComplete)
	}
	if len(args) > 1 {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	doc, ok := workflowDocFor(cmd, args)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	names := append(formulaNames(doc), nodeNames(doc)...)
	return prefixed(names, toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeNodesOfArg completes --node FORMULA/NODE with the nodes of the
// workflow the first argument names.
func completeNodesOfArg(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	doc, ok := workflowDocFor(cmd, args)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return prefixed(nodeNames(doc), toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeWorkflowHosts completes --host with the hosts of the workflow
// the first argument names.
func completeWorkflowHosts(cmd *cobra.Command, args []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	doc, ok := workflowDocFor(cmd, args)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	return prefixed(hostNames(doc), toComplete), cobra.ShellCompDirectiveNoFileComp
}

// completeKnownHosts completes --host with every host the state-store
// records nodes of.
func completeKnownHosts(cmd *cobra.Command, _ []string, toComplete string) ([]cobra.Completion, cobra.ShellCompDirective) {
	nc, ok := completionConn(cmd)
	if !ok {
		return nil, cobra.ShellCompDirectiveNoFileComp
	}
	defer nc.Close()
	var nodes []events.HostNode
	if request(nc, events.StateHost, mustJSON(events.HostQuery{}), completionTimeout, &nodes) != nil {
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
