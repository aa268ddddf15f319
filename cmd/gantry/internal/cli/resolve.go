package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
)

// resolveWorkflow turns what the user typed into a workflow id: an id the
// state-store or the planner knows, else the one id that starts with it.
func resolveWorkflow(ctx context.Context, cl *client.Client, typed string) (string, error) {
	id, _, err := resolveDoc(ctx, cl, typed)
	return id, err
}

// resolveDoc is resolveWorkflow that also returns the workflow's document
// when typed is a whole id (nil otherwise): a command that shows it asks
// the state-store once, within one --timeout.
func resolveDoc(ctx context.Context, cl *client.Client, typed string) (string, *events.WorkflowDoc, error) {
	doc, exact := cl.Status(ctx, typed)
	var se *client.ServiceError
	switch {
	case exact == nil:
		return typed, doc, nil
	case !errors.As(exact, &se) || !errors.Is(se, client.ErrNotFound):
		return "", nil, stateErr(exact) // no state-store answers: nothing to look in
	}
	if _, err := cl.Run(ctx, typed); err == nil {
		return typed, nil, nil // accepted, not yet seen by the state-store
	}
	rows, err := cl.List(ctx, 100000)
	if err != nil {
		return "", nil, stateErr(err)
	}
	var match []events.WorkflowSummary
	for _, r := range rows {
		if typed != "" && strings.HasPrefix(r.WorkflowID, typed) {
			match = append(match, r)
		}
	}
	switch len(match) {
	case 1:
		return match[0].WorkflowID, nil, nil
	case 0:
		return "", nil, failed("%s (gantry list shows them)", se.Description)
	}
	return "", nil, ambiguous(typed, match)
}

// maxCandidates is how many workflows an ambiguous prefix's error lists.
const maxCandidates = 10

// ambiguous is the usage error of a prefix more than one workflow's id
// starts with, listing them (newest first).
func ambiguous(typed string, match []events.WorkflowSummary) error {
	var b strings.Builder
	fmt.Fprintf(&b, "%q starts the ids of %d workflows; give more of it:", typed, len(match))
	for _, r := range match[:min(len(match), maxCandidates)] {
		fmt.Fprintf(&b, "\n%s  %s  %s  %s", r.WorkflowID, r.Workflow, r.Status, r.CreatedAt.Local().Format(time.DateTime))
	}
	if len(match) > maxCandidates {
		fmt.Fprintf(&b, "\nand %d more", len(match)-maxCandidates)
	}
	return &exitError{code: ExitUsage, err: errors.New(b.String())}
}

// watchStart is when to start reading a workflow's events (just before it
// was created, per the state-store, else a day back) and the run generation
// whose end the watch waits for: the planner's snapshot has it as soon as a
// retry is accepted, before the state-store has seen the retry's events.
func watchStart(ctx context.Context, cl *client.Client, id string) (time.Time, int) {
	if ctx == nil {
		ctx = context.Background()
	}
	since, gen := time.Now().Add(-24*time.Hour), 1
	if doc, err := cl.Status(ctx, id); err == nil {
		since, gen = doc.CreatedAt.Add(-time.Second), max(doc.Generation, 1)
	}
	if run, err := cl.Run(ctx, id); err == nil {
		gen = max(gen, run.Generation)
	}
	return since, gen
}
