package engine

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/eventbus/eventbustest"
	"github.com/gantry-dev/gantry/pkg/events"
)

// noise is n characters of text that hardly compresses (base64).
func noise(seed string, n int) string {
	var b strings.Builder
	sum := sha256.Sum256([]byte(seed))
	for b.Len() < n {
		b.WriteString(base64.RawStdEncoding.EncodeToString(sum[:]))
		sum = sha256.Sum256(sum[:])
	}
	return b.String()[:n]
}

// bulky is a composition of formulas whose commands are kb KiB of text
// that hardly compresses, each node with a delete.
func bulky(onFailure string, formulas, kb int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "name: bulky\non_failure: %s\nhosts: {h1: {transport: local}}\nformulas:\n", onFailure)
	for i := range formulas {
		fmt.Fprintf(&b, "  - id: f%d\n    server: h1\n    nodes:\n", i)
		fmt.Fprintf(&b, "      - {name: n, run: \"echo %s\", delete: \"echo %s\"}\n", noise(fmt.Sprint("run", i), kb<<9), noise(fmt.Sprint("del", i), kb<<9))
	}
	return b.String()
}

// A composition whose record fits at acceptance but not with its
// rollback's delete plan (which copies its nodes) was accepted; when it
// failed, the rollback's record could never be written, and the run
// stayed where it was, its failure redelivered forever. Now it is
// refused at once, saying why; the same composition without a rollback
// is accepted.
func TestACompositionWhoseRollbackCannotBeRecordedIsRefused(t *testing.T) {
	h := newHarness(t)
	// 960 KiB of commands, about 750 KiB compressed: a record, not two
	reply, err := h.e.Submit(context.Background(), []byte(bulky("rollback", 10, 96)), false, operator)
	if err != nil {
		t.Fatal(err)
	}
	if reply.Status != "rejected" || len(reply.Errors) != 1 || !strings.Contains(reply.Errors[0], "too large to record with room for what its run adds (its rollback's delete plan") {
		t.Fatalf("reply %s %.300q, want rejected: too large with its rollback", reply.Status, reply.Errors)
	}
	reply, err = h.e.Submit(context.Background(), []byte(bulky("rollback", 10, 96)), true, operator)
	if err != nil || reply.Status != "rejected" || !strings.Contains(strings.Join(reply.Errors, ""), "too large to record with room") {
		t.Errorf("validate: %v %s %.300q, want rejected as the submit is", err, reply.Status, reply.Errors)
	}
	if keys, _ := h.workflows.Keys(context.Background(), workflowKeys); len(keys) != 0 {
		t.Errorf("a refused composition wrote %d records", len(keys))
	}
	reply, err = h.e.Submit(context.Background(), []byte(bulky("stop", 10, 96)), false, operator)
	if err != nil || reply.Status != "accepted" {
		t.Fatalf("without a rollback: %v %s %.300q, want accepted", err, reply.Status, reply.Errors)
	}
}

// largest records the size of the largest record written, in JSON,
// before the compression of large records (which a record of up to
// eventbus.CompressAbove bytes skips).
type largest struct {
	*eventbustest.MemoryBucket[Record]
	max int
}

func (b *largest) Put(ctx context.Context, key string, v Record, rev uint64) (uint64, error) {
	data, err := json.Marshal(v)
	if err != nil {
		return 0, err
	}
	b.max = max(b.max, len(data))
	return b.MemoryBucket.Put(ctx, key, v, rev)
}

// What recordFits measures is at least what a run writes: a run that
// fails and rolls back, then is cancelled, and one that fails, is retried
// in part and cancelled, write no record larger.
func TestARunWritesNoRecordLargerThanItsAcceptanceAllowedFor(t *testing.T) {
	for _, onFailure := range []string{"rollback", "stop"} {
		t.Run(onFailure, func(t *testing.T) {
			h := newHarness(t)
			sizes := &largest{MemoryBucket: h.workflows}
			h.e.Workflows = sizes
			must(t, h.submit(bulky(onFailure, 6, 8)))
			rec, _, err := h.workflows.Get(context.Background(), h.id)
			must(t, err)
			bound, err := json.Marshal(h.e.grown(&rec))
			must(t, err)
			for i := range 5 {
				h.recordNode(dag.OpCreate, fmt.Sprint("f", i), "n", dag.NodeSucceeded)
				must(t, h.formula(fmt.Sprint("f", i), 1, dag.FormulaSucceeded))
			}
			h.recordNode(dag.OpCreate, "f5", "n", dag.NodeFailed)
			must(t, h.formula("f5", 1, dag.FormulaFailed))
			if onFailure == "stop" {
				must(t, h.retryNodes("f5/n"))
			}
			must(t, h.control(events.VerbCancel))
			t.Logf("stored %q", h.stored())
			t.Logf("largest record written %d bytes; acceptance allowed for %d", sizes.max, len(bound))
			if sizes.max > len(bound) {
				t.Errorf("a record of %d bytes written, more than the %d acceptance allowed for", sizes.max, len(bound))
			}
		})
	}
}
