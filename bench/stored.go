package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/events"
)

// streamState is one stream's counts at one moment.
type streamState struct {
	Msgs    uint64 `json:"messages"`
	LastSeq uint64 `json:"last_seq"`
}

// streamStates are every stream's counts, by stream name (a KV bucket's
// stream is KV_<bucket>).
type streamStates map[string]streamState

// readStreams reads every stream of every account from nats-server's
// monitoring endpoint (/jsz): the bench starts nats-server with one on
// loopback, so reading the counts needs no permission on the bus.
func readStreams(ctx context.Context, monitorURL string) (streamStates, error) {
	body, err := monitorGet(ctx, monitorURL+"/jsz?accounts=true&streams=true")
	if err != nil {
		return nil, fmt.Errorf("stream counts: %w", err)
	}
	return parseJsz(body)
}

// readInBytes reads how many bytes nats-server has received from its
// clients (/varz in_bytes): every publish, KV write and request on the bus.
func readInBytes(ctx context.Context, monitorURL string) (uint64, error) {
	body, err := monitorGet(ctx, monitorURL+"/varz")
	if err != nil {
		return 0, fmt.Errorf("bytes in: %w", err)
	}
	var v struct {
		InBytes *uint64 `json:"in_bytes"`
	}
	if err := json.Unmarshal(body, &v); err != nil || v.InBytes == nil {
		return 0, fmt.Errorf("bytes in: /varz has no in_bytes (%v)", err)
	}
	return *v.InBytes, nil
}

// monitorGet reads one of nats-server's monitoring endpoints.
func monitorGet(ctx context.Context, url string) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, body)
	}
	return body, nil
}

// parseJsz takes the streams' states out of a /jsz?accounts=true&streams=true
// answer.
func parseJsz(body []byte) (streamStates, error) {
	var jsz struct {
		Accounts []struct {
			Name    string `json:"name"`
			Streams []struct {
				Name  string      `json:"name"`
				State streamState `json:"state"`
			} `json:"stream_detail"`
		} `json:"account_details"`
	}
	if err := json.Unmarshal(body, &jsz); err != nil {
		return nil, fmt.Errorf("stream counts: /jsz: %w", err)
	}
	out := streamStates{}
	for _, a := range jsz.Accounts {
		for _, s := range a.Streams {
			if _, dup := out[s.Name]; dup {
				return nil, fmt.Errorf("stream counts: stream %s is in two accounts", s.Name)
			}
			out[s.Name] = s.State
		}
	}
	return out, nil
}

// storedBetween is how many messages each stream stored between two
// snapshots: the growth of its last sequence, which counts every message
// stored, those deleted or overwritten since (a KV key written twice, a
// work-queue message acked) included. A stream new in after counts from
// its start; one whose sequence went back was re-created, and counts what
// it holds now. Streams that stored nothing are left out.
func storedBetween(before, after streamStates) map[string]uint64 {
	out := map[string]uint64{}
	for name, a := range after {
		b, ok := before[name]
		n := a.LastSeq
		if ok && a.LastSeq >= b.LastSeq {
			n = a.LastSeq - b.LastSeq
		}
		if n > 0 {
			out[name] = n
		}
	}
	return out
}

// storeLabels name the streams and buckets in the printed table.
var storeLabels = map[string]string{
	events.StreamEvents:                     "events",
	events.StreamDispatch:                   "dispatch",
	events.StreamGates:                      "gates",
	events.StreamLogs:                       "logs",
	events.KVStream(events.BucketState):     "state KV",
	events.KVStream(events.BucketNodes):     "nodes KV",
	events.KVStream(events.BucketRuns):      "runs KV",
	events.KVStream(events.BucketWorkflows): "workflows KV",
	events.KVStream(events.BucketOutputs):   "outputs KV",
	events.KVStream(events.BucketSlots):     "slots KV",
}

func storeLabel(stream string) string {
	if l, ok := storeLabels[stream]; ok {
		return l
	}
	return stream
}

// fmtPerNode prints figures by name, the largest first, and their total.
func fmtPerNode(m map[string]float64, label func(string) string, prec int) string {
	keys := slices.SortedFunc(maps.Keys(m), func(a, b string) int {
		if m[a] != m[b] {
			if m[a] > m[b] {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	total := 0.0
	var parts []string
	for _, k := range keys {
		total += m[k]
		parts = append(parts, fmt.Sprintf("%s %.*f", label(k), prec, m[k]))
	}
	return fmt.Sprintf("%.*f: %s", prec, total, strings.Join(parts, ", "))
}

// settleTimeout bounds how long settle waits for the streams to stop
// growing after a run's end.
const settleTimeout = 5 * time.Second

// settle waits until no stream has stored anything for three reads in a
// row, 100 ms apart (what a run causes after its end event, as the
// state-store's last projection writes, belongs to the run), and returns
// the last read. It gives up after settleTimeout and says so.
func settle(ctx context.Context, monitorURL string) (streamStates, error) {
	deadline := time.Now().Add(settleTimeout)
	last, err := readStreams(ctx, monitorURL)
	if err != nil {
		return nil, err
	}
	for quiet := 0; quiet < 2; {
		if time.Now().After(deadline) {
			fmt.Printf("  (the streams still grew %s after the run's end)\n", settleTimeout)
			return last, nil
		}
		time.Sleep(100 * time.Millisecond)
		cur, err := readStreams(ctx, monitorURL)
		if err != nil {
			return nil, err
		}
		if len(storedBetween(last, cur)) == 0 {
			quiet++
		} else {
			quiet = 0
		}
		last = cur
	}
	return last, nil
}
