package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/spf13/cobra"
)

// pruneOutput is what gantry prune -o json prints.
type pruneOutput struct {
	events.PruneReply
	Sizes []storeSizes `json:"sizes"`
}

// storeSizes is one stream's or bucket's size before and after a prune.
type storeSizes struct {
	Store  string           `json:"store"`
	Before events.StoreSize `json:"before"`
	After  events.StoreSize `json:"after"`
	// Estimated: After is worked out from what would go, not measured
	// (a dry run), and its bytes from the store's average message size
	// where gantry cannot read the messages (gantry_state).
	Estimated bool `json:"estimated,omitempty"`
}

func newPruneCmd() *cobra.Command {
	var cf connFlags
	var output, olderThan string
	var keep int
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune [--older-than D] [--keep N] [--dry-run]",
		Short: "Remove finished workflows' records, documents, events and output lines",
		Long: `prune removes finished workflows (succeeded, failed or cancelled) that ended
more than --older-than ago (30d, 12h, 90m) and/or are not among the newest
--keep finished runs of their composition; with both, a run goes only when
both say so. Their workflow records, run snapshots, node records, status
documents, events and output lines go. Accepted, running and paused
workflows are never touched. A finished run that is the latest of its
composition to have run a node on its host stays whole, whatever the
rules: what a new submission skips as already done, and what drift and
gantry state report, come from it.

--dry-run lists what would go and the sizes of the streams and buckets
before and after, and removes nothing. Only operators may prune. The
planner also prunes on its own by its retention setting (--retention-age,
--retention-keep; docs/operations.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			req := events.PruneRequest{DryRun: dryRun}
			if cmd.Flags().Changed("older-than") {
				if _, err := events.ParseAge(olderThan); err != nil {
					return &exitError{code: ExitUsage, err: fmt.Errorf("--older-than: %w", err)}
				}
				req.OlderThan = olderThan
			}
			if cmd.Flags().Changed("keep") {
				if keep < 0 {
					return &exitError{code: ExitUsage, err: fmt.Errorf("--keep %d: a number of runs, 0 or more", keep)}
				}
				req.Keep = &keep
			}
			if req.OlderThan == "" && req.Keep == nil {
				return &exitError{code: ExitUsage, err: errors.New("say which finished runs go: --older-than D, --keep N, or both")}
			}
			cl, err := cf.connectOperator()
			if err != nil {
				return err
			}
			defer cl.Close()
			ctx, cancel := context.WithTimeout(cmd.Context(), cf.timeout)
			defer cancel()
			before := cl.StoreSizes(ctx)
			// Its own wait (the client's timeout): the sizes read above may have
			// used up ctx (a viewer waits for JetStream answers it may not get).
			reply, err := cl.Prune(cmd.Context(), req)
			var se *client.ServiceError
			if errors.As(err, &se) {
				code := ExitProblem
				if se.Code == "400" {
					code = ExitUsage
				}
				return &exitError{code: code, err: fmt.Errorf("prune: %s", se.Description)}
			}
			if err != nil {
				return busErr(err)
			}
			out := pruneOutput{PruneReply: reply}
			if dryRun {
				out.Sizes = estimateAfter(ctx, cl, before, &reply)
			} else {
				out.Sizes = measuredAfter(ctx, cl, before, &reply)
			}
			if structured(output) {
				return printAs(cmd.OutOrStdout(), output, out)
			}
			printPrune(cmd.OutOrStdout(), &out)
			if len(reply.Errors) > 0 {
				return &exitError{code: ExitProblem, err: fmt.Errorf("%d workflow(s) not pruned this time (the next prune tries again)", len(reply.Errors))}
			}
			return nil
		},
	}
	cf.add(cmd)
	// A prune of many runs takes a while: wait longer than for a request.
	if f := cmd.Flags().Lookup("timeout"); f != nil {
		_ = f.Value.Set("10m")
		f.DefValue = "10m0s"
	}
	cmd.Flags().StringVar(&olderThan, "older-than", "", "finished runs that ended longer ago than this (30d, 12h, 90m)")
	cmd.Flags().IntVar(&keep, "keep", 0, "keep the newest N finished runs of each composition")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "show what would go, and the sizes before and after; remove nothing")
	outputFlag(cmd, &output, "text", "json")
	return cmd
}

func minus(a, b events.StoreSize) events.StoreSize {
	if b.Messages > a.Messages {
		b.Messages = a.Messages
	}
	if b.Bytes > a.Bytes {
		b.Bytes = a.Bytes
	}
	return events.StoreSize{Messages: a.Messages - b.Messages, Bytes: a.Bytes - b.Bytes}
}

// estimateAfter works out each store's size once the dry run's workflows
// are gone: what the planner counted, the output lines read here, and for
// gantry_state its documents at the bucket's average size.
func estimateAfter(ctx context.Context, cl *client.Client, before map[string]events.StoreSize, reply *events.PruneReply) []storeSizes {
	removed := map[string]events.StoreSize{}
	for k, v := range reply.Removed {
		removed[k] = v
	}
	if len(reply.Pruned) > 0 {
		ids := map[string]bool{}
		var spans []events.Span
		for _, p := range reply.Pruned {
			ids[p.WorkflowID] = true
			spans = append(spans, events.WorkflowSpan(p.CreatedAt, p.EndedAt))
		}
		if sz, err := cl.WorkflowMessages(ctx, events.StreamLogs, ids, spans); err == nil {
			removed[events.StreamLogs] = sz
		}
	}
	var out []storeSizes
	for _, st := range events.SizedStores {
		b, ok := before[st]
		if !ok {
			continue
		}
		s := storeSizes{Store: st, Before: b, Estimated: true}
		switch st {
		case events.BucketState:
			s.After = minus(b, stateDocuments(ctx, cl.WithTimeout(10*time.Second), b, reply))
		case events.StreamEvents:
			// Each pruned workflow leaves its pruned event.
			s.After = minus(b, removed[st])
			s.After.Messages += uint64(len(reply.Pruned))
			s.After.Bytes += uint64(prunedEventBytes(reply.Pruned))
		default:
			s.After = minus(b, removed[st])
		}
		out = append(out, s)
	}
	return out
}

// stateDocuments is about what the state-store's documents of the pruned
// workflows take: each workflow's status document as state.workflow
// assembles it (its summary, formulas and nodes), with a KV record's
// overhead per document; at the bucket's average where one cannot be read.
func stateDocuments(ctx context.Context, cl *client.Client, b events.StoreSize, reply *events.PruneReply) events.StoreSize {
	sz := events.StoreSize{Messages: uint64(reply.Documents)}
	avg := uint64(0)
	if b.Messages > 0 {
		avg = b.Bytes / b.Messages
	}
	per := uint64(0)
	if len(reply.Pruned) > 0 {
		per = sz.Messages / uint64(len(reply.Pruned))
	}
	for _, p := range reply.Pruned {
		q, _ := json.Marshal(map[string]string{"workflow_id": p.WorkflowID})
		var doc json.RawMessage
		if err := cl.Request(ctx, events.StateWorkflow, q, nil, &doc); err != nil {
			sz.Bytes += per * avg
			continue
		}
		sz.Bytes += uint64(len(doc)) + per*uint64(len(events.BucketState)+len(p.WorkflowID)+110)
	}
	return sz
}

// prunedEventBytes is about what the pruned events of ws take in the
// event stream.
func prunedEventBytes(ws []events.PrunedWorkflow) int {
	n := 0
	for _, w := range ws {
		env, err := events.New("planner/"+strings.Repeat("x", 24), &events.WorkflowPruned{Ref: events.Ref{WorkflowID: w.WorkflowID, Workflow: w.Workflow, Operation: w.Operation},
			FinalStatus: w.Status, CreatedAt: w.CreatedAt, EndedAt: w.EndedAt, Reason: "gantry prune --keep 10"})
		if err != nil {
			continue
		}
		b, _ := json.Marshal(env)
		n += len(b) + len(events.WorkflowLifecycle(w.WorkflowID)) + len(events.PrunedMsgID(w.WorkflowID)) + 60
	}
	return n
}

// measuredAfter reads the sizes after a prune, once the executors and the
// state-store have acted on it: when the node records are down by what
// the planner counted, the state-store's documents are fewer than before
// (each pruned run has some), and two readings 300 ms apart agree (10 s
// at most).
func measuredAfter(ctx context.Context, cl *client.Client, before map[string]events.StoreSize, reply *events.PruneReply) []storeSizes {
	after := cl.StoreSizes(ctx)
	if len(reply.Pruned) > 0 {
		want := minus(before[events.BucketNodes], reply.Removed[events.BucketNodes]).Messages
		state, hasState := before[events.BucketState]
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
			time.Sleep(300 * time.Millisecond)
			now := cl.StoreSizes(ctx)
			stateDone := !hasState || state.Messages == 0 || now[events.BucketState].Messages < state.Messages
			settled := now[events.BucketNodes].Messages <= want && stateDone && fmt.Sprint(now) == fmt.Sprint(after)
			after = now
			if settled {
				break
			}
		}
	}
	var out []storeSizes
	for _, st := range events.SizedStores {
		if b, ok := before[st]; ok {
			out = append(out, storeSizes{Store: st, Before: b, After: after[st]})
		}
	}
	return out
}

func printPrune(w io.Writer, out *pruneOutput) {
	verb := "pruned"
	if out.DryRun {
		verb = "would prune"
	}
	linef(w, "%s %d finished workflow(s); %d not finished (never pruned)", verb, len(out.Pruned), out.Unfinished)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, p := range out.Pruned {
		row(tw, "  "+p.WorkflowID, p.Workflow, string(p.Operation), string(p.Status), "ended "+p.EndedAt.Local().Format(time.DateTime))
	}
	tw.Flush()
	if len(out.Kept) > 0 {
		linef(w, "kept %d that the rules chose: the latest run of a node on its host", len(out.Kept))
		for _, k := range out.Kept {
			row(tw, "  "+k.WorkflowID, k.Workflow, string(k.Status), strconv.Itoa(k.Nodes)+" node(s)")
		}
		tw.Flush()
	}
	for _, e := range out.Errors {
		linef(w, "not pruned: %s", e)
	}
	if len(out.Sizes) == 0 {
		return
	}
	after := "after"
	if out.DryRun {
		after = "after (estimated)"
	}
	linef(w, "")
	row(tw, "store", "messages before", "bytes before", "messages "+after, "bytes "+after)
	for _, s := range out.Sizes {
		row(tw, s.Store, strconv.FormatUint(s.Before.Messages, 10), humanBytes(s.Before.Bytes), strconv.FormatUint(s.After.Messages, 10), humanBytes(s.After.Bytes))
	}
	tw.Flush()
}

// humanBytes is n bytes as "1,234,567 (1.2 MB)".
func humanBytes(n uint64) string {
	switch {
	case n >= 1<<20:
		return fmt.Sprintf("%d (%.1f MiB)", n, float64(n)/(1<<20))
	case n >= 1<<10:
		return fmt.Sprintf("%d (%.1f KiB)", n, float64(n)/(1<<10))
	}
	return strconv.FormatUint(n, 10)
}
