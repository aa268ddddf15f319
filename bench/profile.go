package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// profileWindow is the length of each CPU profile the profiler asks a
// process for; a run's profile is its windows merged, so the last one
// may reach up to this much past the run's end.
const profileWindow = 2 * time.Second

// profiler takes CPU profiles of a stack's processes (their pprof
// endpoints) while runs go on: windows of profileWindow back to back
// between start and stop, written to a temporary directory, merged into
// one profile per process at the end.
type profiler struct {
	targets map[string]string // process -> host:port
	tmp     string
	windows map[string][]string // process -> its windows' files
	mu      sync.Mutex
	stopc   chan struct{}
	wg      sync.WaitGroup
	err     error
}

func newProfiler(targets map[string]string) (*profiler, error) {
	tmp, err := os.MkdirTemp("", "gantry-bench-profile-")
	if err != nil {
		return nil, err
	}
	return &profiler{targets: targets, tmp: tmp, windows: map[string][]string{}}, nil
}

// start profiles every process until stop.
func (p *profiler) start() {
	p.stopc = make(chan struct{})
	for name, addr := range p.targets {
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for {
				if err := p.window(name, addr); err != nil {
					p.fail(err)
					return
				}
				select {
				case <-p.stopc:
					return
				default:
				}
			}
		}()
	}
}

// stop ends the windows under way (it waits for them) and returns the
// first error a window met.
func (p *profiler) stop() error {
	close(p.stopc)
	p.wg.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

func (p *profiler) fail(err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.err == nil {
		p.err = err
	}
}

// window takes one CPU profile of a process.
func (p *profiler) window(name, addr string) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", addr, int(profileWindow.Seconds()))
	ctx, cancel := context.WithTimeout(context.Background(), profileWindow+30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profile of %s: %w", name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profile of %s: %s %v: %.200s", name, resp.Status, err, body)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	f := filepath.Join(p.tmp, fmt.Sprintf("%s-%d.pb.gz", name, len(p.windows[name])))
	p.windows[name] = append(p.windows[name], f)
	return os.WriteFile(f, body, 0o600)
}

// merge writes each process's windows merged into one profile,
// dir/<scenario>-<process>.pb.gz (`go tool pprof -proto`), removes the
// windows, and returns the merged files by process.
func (p *profiler) merge(ctx context.Context, dir, scenario string) (map[string]string, error) {
	defer os.RemoveAll(p.tmp)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	out := map[string]string{}
	for name, files := range p.windows {
		dst := filepath.Join(dir, fmt.Sprintf("%s-%s.pb.gz", scenario, name))
		cmd := exec.CommandContext(ctx, "go", append([]string{"tool", "pprof", "-proto"}, files...)...)
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("merging %s's profiles: %w: %s", name, err, stderr.Bytes())
		}
		if err := os.WriteFile(dst, b, 0o644); err != nil {
			return nil, err
		}
		out[name] = dst
	}
	return out, nil
}

// A step is where a sample of CPU goes, named by the functions it passes
// through (regular expressions on the function's full name).
type step struct {
	name  string
	match *regexp.Regexp
}

// wholeStackSteps are looked for along the whole stack, in this order: a
// sample that passes through JSON encoding inside a KV write is JSON.
var wholeStackSteps = []step{
	{"the profiler itself", regexp.MustCompile(`^runtime/pprof\.|^net/http/pprof\.`)},
	{"process start (fork/exec)", regexp.MustCompile(`^os/exec\.|^os\.StartProcess$|^os\.startProcess$|^syscall\.forkExec`)},
	{"JSON", regexp.MustCompile(`^encoding/json\.|go-json-experiment/json|json-iterator`)},
	{"compression", regexp.MustCompile(`^compress/|klauspost/compress`)},
	{"crypto (auth, TLS, SSH)", regexp.MustCompile(`^crypto/|nats-io/nkeys|^golang\.org/x/crypto/`)},
	{"logging (slog)", regexp.MustCompile(`^log/slog\.`)},
	{"host attempt (hostexec: files, lock, output)", regexp.MustCompile(`^github\.com/gantry-dev/gantry/pkg/hostexec[./]`)}, // and its transports (localexec, sshexec)
	{"concurrency slots (executor)", regexp.MustCompile(`^github\.com/gantry-dev/gantry/services/executor/internal/slots\.`)},
	{"KV (client)", regexp.MustCompile(`nats\.go/jetstream\.\(\*kv\)`)},
	{"JetStream publish (client)", regexp.MustCompile(`nats\.go/jetstream\.\(\*jetStream\)\.Publish`)},
}

// leafSteps are looked for from the innermost function outwards: the
// first one found names the sample. Go's runtime and the system call
// wrappers name none, so their time goes to who called them, except for
// GC and the scheduler, which have stacks of their own.
var leafSteps = []step{
	{"nats-server: stream store (file)", regexp.MustCompile(`nats-server/v2/server\.\(\*(fileStore|msgBlock)\)`)},
	{"nats-server: consumer state files", regexp.MustCompile(`nats-server/v2/server\.\(\*consumerFileStore\)|nats-server/v2/server\.writeAtomically`)},
	{"nats-server: streams, consumers, acks", regexp.MustCompile(`nats-server/v2/server\.\(\*(stream|consumer|jetStream|jsAccount|waitQueue)\)|nats-server/v2/server\.\(\*Server\)\.(js|jetStream)`)},
	{"nats-server: subjects, permissions", regexp.MustCompile(`nats-server/v2/server\.\(\*(Sublist|Account|perm)\)|nats-server/v2/server/(stree|gsl)\.|nats-server/v2/server\.(matchLevel|addNodeToResults|isSubsetMatch|subjectIsLiteral)|nats-server/v2/server\.\(\*client\)\.(pubAllowed|canSubscribe|checkPermissions|pruneReplyPerms|pruneDenyCache|processServiceImport)`)},
	{"nats-server: socket I/O", regexp.MustCompile(`nats-server/v2/server\.\(\*client\)\.(flushOutbound|readLoop|writeLoop|flushClients|flushSignal)`)},
	{"nats-server: message routing, headers", regexp.MustCompile(`nats-server/v2/server\.`)},
	{"NATS client (consume, I/O)", regexp.MustCompile(`^github\.com/nats-io/nats\.go`)},
	{"gantry's own code", regexp.MustCompile(`^github\.com/gantry-dev/gantry/`)},
	{"GC", regexp.MustCompile(`^runtime\.(gcBgMarkWorker|bgsweep|bgscavenge|gcAssist|markroot|gcDrain)`)},
}

// stepOf names the step of one sample's stack (innermost function first).
func stepOf(stack []string) string {
	for _, s := range wholeStackSteps {
		if slices.ContainsFunc(stack, s.match.MatchString) {
			return s.name
		}
	}
	for _, fn := range stack {
		for _, s := range leafSteps {
			if s.match.MatchString(fn) {
				return s.name
			}
		}
	}
	if len(stack) > 0 && strings.HasPrefix(stack[len(stack)-1], "runtime.") {
		return "Go runtime (scheduler, timers)"
	}
	return "other"
}

// stepSeconds reads a CPU profile (`go tool pprof -traces`) and returns
// its CPU seconds by step, and in all.
func stepSeconds(ctx context.Context, profile string) (map[string]float64, float64, error) {
	cmd := exec.CommandContext(ctx, "go", "tool", "pprof", "-traces", profile)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, 0, fmt.Errorf("go tool pprof -traces %s: %w: %s", profile, err, stderr.Bytes())
	}
	samples, err := parseTraces(out)
	if err != nil {
		return nil, 0, fmt.Errorf("%s: %w", profile, err)
	}
	by, total := map[string]float64{}, 0.0
	for _, s := range samples {
		by[stepOf(s.stack)] += s.seconds
		total += s.seconds
	}
	return by, total, nil
}

// sample is one stack of a profile and the CPU seconds spent in it.
type sample struct {
	seconds float64
	stack   []string // innermost first
}

// parseTraces reads the text of `go tool pprof -traces`: a header, then
// for each stack a separator line, optional label lines (key: value), a
// line with the value and the innermost function, and one line per
// caller.
func parseTraces(b []byte) ([]sample, error) {
	var out []sample
	var cur *sample
	sc := bufio.NewScanner(bytes.NewReader(b))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			cur = nil
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 || (cur == nil && !strings.HasPrefix(line, " ")) {
			continue // the header
		}
		if cur == nil {
			if strings.HasSuffix(f[0], ":") {
				continue // a label
			}
			secs, err := parseDuration(f[0])
			if err != nil || len(f) < 2 {
				return nil, fmt.Errorf("pprof -traces: line %q: %v", line, err)
			}
			out = append(out, sample{seconds: secs})
			cur = &out[len(out)-1]
			f = f[1:]
		}
		// pprof escapes dots in a module path's last element
		// (github.com/nats-io/nats%2ego)
		cur.stack = append(cur.stack, strings.ReplaceAll(f[0], "%2e", "."))
	}
	return out, sc.Err()
}

// parseDuration reads a pprof value as 10ms, 1.50s, 250us or 1.2mins.
func parseDuration(v string) (float64, error) {
	units := []struct {
		suffix string
		secs   float64
	}{{"mins", 60}, {"hrs", 3600}, {"ms", 1e-3}, {"us", 1e-6}, {"µs", 1e-6}, {"ns", 1e-9}, {"s", 1}}
	for _, u := range units {
		if n, ok := strings.CutSuffix(v, u.suffix); ok {
			x, err := strconv.ParseFloat(n, 64)
			return x * u.secs, err
		}
	}
	return 0, fmt.Errorf("value %q has no time unit", v)
}
