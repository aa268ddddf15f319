// Command bench measures gantry against the tools users would otherwise
// pick: `make bench` (BENCH=<scenario> runs one). The services run as
// separate processes against a real nats-server with file storage. It
// prints a table and writes the same figures to bench/results.json.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/dag/dagtest"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/localexec"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// Scenario figures in results.json.
type Scenario struct {
	WallS      float64            `json:"wall_s"` // median
	Runs       []float64          `json:"runs"`
	Min        float64            `json:"min_s"`
	Max        float64            `json:"max_s"`
	Nodes      int                `json:"nodes"`
	NodesPerS  float64            `json:"nodes_per_s"`
	PerNodeMS  float64            `json:"per_node_ms"`
	ReadyP50MS float64            `json:"ready_to_running_p50_ms,omitempty"`
	ReadyP99MS float64            `json:"ready_to_running_p99_ms,omitempty"`
	PeakRSSMB  map[string]float64 `json:"peak_rss_mb,omitempty"`
	CPUSeconds map[string]float64 `json:"cpu_s,omitempty"` // per process, all runs (each from its submission to its end, the streams settled)
	// What a node costs the stack, over all runs: CPU ms by process, and
	// messages stored by stream (the growth of its last sequence, so
	// messages later deleted or overwritten count; per link, in a chain).
	CPUMSPerNode       map[string]float64 `json:"cpu_ms_per_node,omitempty"`
	CPUMSPerNodeTotal  float64            `json:"cpu_ms_per_node_total,omitempty"`
	StoredPerNode      map[string]float64 `json:"stored_per_node,omitempty"`
	StoredPerNodeTotal float64            `json:"stored_per_node_total,omitempty"`
	// BusKBPerNode is what nats-server received from its clients (/varz
	// in_bytes: publishes, KV writes, requests) per node, over all runs.
	BusKBPerNode float64 `json:"bus_kb_per_node,omitempty"`
	// CoresBusy is the median over the runs of the machine's cores busy
	// (every process, /proc/stat) from submission to end: near the
	// core count, the run is bound by CPU, and so is its ratio to a floor.
	CoresBusy float64 `json:"cores_busy,omitempty"`
	// With -profile: each process's CPU profile over the runs, and its
	// CPU ms per node by step (profile.go).
	Profiles         map[string]string             `json:"profiles,omitempty"`
	ProfileMSPerNode map[string]map[string]float64 `json:"profile_ms_per_node,omitempty"`
	LinkMS           map[string]float64            `json:"link_breakdown_ms,omitempty"` // chain: median of each segment of a link`
	IdleRSSMB        map[string]float64            `json:"idle_rss_mb,omitempty"`
	Peers            map[string]map[string]float64 `json:"peers,omitempty"`
	RatioVsPeer      map[string]float64            `json:"ratio_vs_peer,omitempty"` // gantry wall / peer wall
	Status           string                        `json:"status"`
	Target           string                        `json:"target"`
	Note             string                        `json:"note,omitempty"`
	// chain-1000: the process-start floor, measured between its runs
	// (median ms per start of `true` through the Local runner), and the
	// median link over it.
	ProcessStartMS  float64 `json:"process_start_ms,omitempty"`
	ProcessStartMin float64 `json:"process_start_min_ms,omitempty"`
	ProcessStartMax float64 `json:"process_start_max_ms,omitempty"`
	LinkVsStart     float64 `json:"link_vs_process_start,omitempty"`
	// The same command started as each node's is, as a durable attempt
	// holding a host lock (its supervisor), without the rest of gantry.
	DurableStartMS float64 `json:"durable_start_ms,omitempty"`
	// The bus floor (busfloor.go), measured between its runs: ms per link
	// of the least loop of each shape, by messages stored per link.
	BusFloorMS    map[string]float64 `json:"bus_floor_ms,omitempty"`
	PerRunDetails []string           `json:"-"`
}

type results struct {
	Machine   string               `json:"machine"`
	When      string               `json:"when"`
	Scenarios map[string]*Scenario `json:"scenarios"`
	DevMode   map[string]float64   `json:"gantry_dev,omitempty"`
	// Ratios are the two ratios with a target, each of two figures
	// measured in the same run of the bench (see ratios).
	Ratios map[string]Ratio `json:"ratios,omitempty"`
}

// Ratio is gantry's figure over its floor, both measured in one run.
type Ratio struct {
	Gantry float64 `json:"gantry"`
	Floor  float64 `json:"floor"`
	Unit   string  `json:"unit"`
	Ratio  float64 `json:"ratio"`
	Target float64 `json:"target"` // at most
	Met    bool    `json:"met"`
}

func main() {
	only := flag.String("scenario", os.Getenv("BENCH"), "run these scenarios only, comma-separated (chain-1000, fanout-1000, fanout-1000x5, wide-1000, ssh-500, executors-N, fleet-1000, plan-100k, dev)")
	runs := flag.Int("runs", 5, "runs per scenario")
	sshRuns := flag.Int("ssh-runs", 3, "runs of ssh-500 and each peer")
	ansibleRuns := flag.Int("ansible-runs", 1, "runs of the Ansible peer (slow)")
	opensshRuns := flag.Int("openssh-runs", -1, "runs of the OpenSSH peer (default: -ssh-runs)")
	fleetAnsible := flag.Int("fleet-ansible-hosts", 200, "hosts of fleet-1000 Ansible runs on (its time is scaled to 1,000)")
	binDir := flag.String("bin", "bin", "where the service binaries and nats-server are")
	out := flag.String("out", "bench/results.json", "results file")
	profile := flag.String("profile", "", "take CPU profiles of nats-server and each service during each scenario's runs: DIR/<scenario>-<process>.pb.gz, and print where each node's CPU goes")
	flag.Parse()
	abs, _ := filepath.Abs(*binDir)
	res := &results{Machine: machine(), When: time.Now().UTC().Format(time.RFC3339), Scenarios: map[string]*Scenario{}}
	if b, err := os.ReadFile(*out); err == nil && *only != "" {
		_ = json.Unmarshal(b, res) // keep the other scenarios' last figures
		res.When = time.Now().UTC().Format(time.RFC3339)
	}
	want := func(name string) bool { return *only == "" || slices.Contains(strings.Split(*only, ","), name) }
	// A scenario that fails is printed and left out (its figures of an
	// earlier run too); the others still run and are written, and the
	// bench exits 1.
	failed := false
	fail := func(name string, err error) {
		fmt.Fprintln(os.Stderr, "bench:", err)
		delete(res.Scenarios, name)
		failed = true
	}
	if want("plan-100k") {
		res.Scenarios["plan-100k"] = planBench(*runs)
	}
	local := []struct {
		name   string
		comp   func() *dag.Composition
		target string
	}{
		{"chain-1000", chain1000, "<= 1.5 ms per link, < 1.5 s"},
		{"fanout-1000", fanout1000, ">= 2000 nodes/s"},
		{"fanout-1000x5", fanout1000x5, "measured: a workflow kept a document a value"},
		{"wide-1000", wide1000, ">= 2000 nodes/s"},
	}
	for _, sc := range local {
		if !want(sc.name) {
			continue
		}
		var starts, durables []float64
		floors := map[string][]float64{}
		var after func() error
		if sc.name == "chain-1000" {
			after = func() error {
				ms, err := processStart(processStarts, false)
				if err != nil {
					return err
				}
				dms, err := processStart(processStarts/2, true)
				if err != nil {
					return err
				}
				starts, durables = append(starts, ms), append(durables, dms)
				fmt.Printf("  %s process start (Local runner, median of %d): %.3f ms; as a durable attempt (%d, each %s after the last): %.3f ms\n", sc.name, processStarts, ms, processStarts/2, durablePause, dms)
				for _, f := range busFloorShapes {
					ms, err := busFloor(abs, f)
					if err != nil {
						return err
					}
					k := f.key()
					floors[k] = append(floors[k], ms)
					fmt.Printf("  %s bus floor, %s: %.3f ms per link\n", sc.name, k, ms)
				}
				return nil
			}
		}
		s, err := workflowBench(workflowRun{name: sc.name, comp: sc.comp, runs: *runs, stack: stackConfig{binDir: abs}, after: after, profileDir: *profile})
		if err != nil {
			fail(sc.name, err)
			continue
		}
		s.Target = sc.target
		if len(starts) > 0 {
			s.ProcessStartMS = median(starts)
			s.ProcessStartMin, s.ProcessStartMax = minMax(starts)
			s.LinkVsStart = s.PerNodeMS / s.ProcessStartMS
			s.DurableStartMS = median(durables)
			s.BusFloorMS = map[string]float64{}
			for k, xs := range floors {
				s.BusFloorMS[k] = median(xs)
			}
		}
		res.Scenarios[sc.name] = s
	}
	if want("ssh-500") {
		if *opensshRuns < 0 {
			*opensshRuns = *sshRuns
		}
		if s, err := sshBench(sshRun{binDir: abs, runs: *sshRuns, opensshRuns: *opensshRuns, ansibleRuns: *ansibleRuns, profileDir: *profile}); err != nil {
			fail("ssh-500", err)
		} else {
			res.Scenarios["ssh-500"] = s
		}
	}
	if want("executors-N") {
		m, err := executorsBench(abs, 1)
		if err != nil {
			fail("executors-N", err)
		}
		for k, v := range m {
			res.Scenarios[k] = v
		}
	}
	if want("fleet-1000") {
		if s, err := fleetBench(fleetRun{binDir: abs, maxFormulas: fleetParallel, ansibleHosts: *fleetAnsible, profileDir: *profile}); err != nil {
			fail("fleet-1000", err)
		} else {
			res.Scenarios["fleet-1000"] = s
		}
	}
	if want("dev") || *only == "" {
		if d, err := devBench(abs); err != nil {
			fail("dev", err)
			res.DevMode = nil
		} else {
			res.DevMode = d
		}
	}
	res.Ratios = ratios(res)
	printTable(res)
	b, _ := json.MarshalIndent(res, "", "  ")
	if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", *out)
	if failed {
		os.Exit(1)
	}
}

func machine() string {
	cpu := "?"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				cpu = strings.TrimSpace(strings.SplitN(l, ":", 2)[1])
				break
			}
		}
	}
	n := 0
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		n = strings.Count(string(b), "processor\t:")
	}
	return fmt.Sprintf("%s, %d cores", cpu, n)
}

func planBench(runs int) *Scenario {
	var xs []float64
	for i := 0; i < runs+1; i++ {
		c := dagtest.Layered(10000, 10, 100)
		start := time.Now()
		if _, err := dag.NewPlan(c); err != nil {
			panic(err)
		}
		if i > 0 { // the first run warms up
			xs = append(xs, time.Since(start).Seconds())
		}
	}
	s := &Scenario{Runs: xs, WallS: median(xs), Nodes: 100000, Target: "< 300 ms", Status: "ok"}
	s.Min, s.Max = minMax(xs)
	s.NodesPerS = float64(s.Nodes) / s.WallS
	s.PerNodeMS = s.WallS * 1000 / float64(s.Nodes)
	return s
}

// processStarts is how many processes processStart starts after each
// chain-1000 run.
const processStarts = 200

// durablePause is the pause before each durable start processStart times:
// about what a chain link spends on the bus between two attempts.
const durablePause = 3 * time.Millisecond

// processStart is the floor under a chain link: it starts `true` n times
// in a row the way the executor starts each node's process with transport
// local (localexec.Local: /bin/sh -c, its own process group, output
// captured), and returns the median milliseconds per start. durable runs
// it as each node's command runs: a durable attempt holding a host lock,
// under its supervisor (attempt files beside the executor's), each
// after a pause of durablePause, as the next node of a chain comes some
// milliseconds after the last one ended.
func processStart(n int, durable bool) (float64, error) {
	dir, err := besideAttempts("bench-start-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	local := localexec.Local{Worker: localexec.WorkerEnvOf(os.LookupEnv)} // as the executor's
	xs := make([]float64, 0, n)
	for i := range n {
		cmd := hostexec.Attempt{Command: hostexec.Command{Script: "true"}}
		if durable {
			cmd.ID, cmd.Lock, cmd.Env = fmt.Sprintf("bench.%d", i), "bench.f.n", map[string]string{"GANTRY_ATTEMPTS": filepath.Join(dir, "attempts")}
		}
		if durable {
			time.Sleep(durablePause)
		}
		var (
			res hostexec.Result
			err error
		)
		start := time.Now()
		if durable {
			res, err = local.RunAttempt(context.Background(), cmd)
		} else {
			res, err = local.Run(context.Background(), cmd.Command)
		}
		if err != nil || res.ExitCode != 0 {
			return 0, fmt.Errorf("process start: exit %d: %v", res.ExitCode, err)
		}
		xs = append(xs, float64(time.Since(start).Microseconds())/1000)
	}
	return median(xs), nil
}

// besideAttempts makes a directory beside the executor's own attempt
// files, in $HOME/.gantry, for a floor's attempts. Not in the temporary
// directory, nor right under $HOME: creating a file in a new directory
// there cost this VM's ext4 far more (0.1-1.3 ms of CPU each, against
// 0.03-0.08 ms in $HOME/.gantry/attempts or a new directory of
// $HOME/.gantry), a cost under the floor that the executor does not pay.
func besideAttempts(prefix string) (string, error) {
	home, err := os.UserHomeDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(filepath.Join(home, ".gantry"), 0o700); err != nil {
		return "", err
	}
	return os.MkdirTemp(filepath.Join(home, ".gantry"), prefix)
}

// ratios are the figures with a target over their floors: ssh-500's and
// fleet-1000's median wall over the raw x/crypto/ssh loop's (run after
// each of their runs, on the same hosts), and chain-1000's median link
// over the process start measured after each of its runs.
func ratios(r *results) map[string]Ratio {
	out := map[string]Ratio{}
	for _, x := range []struct {
		name   string
		target float64
	}{{"ssh-500", 1.10}, {"fleet-1000", 1.5}} {
		if s, ok := r.Scenarios[x.name]; ok && s.Peers["floor"] != nil {
			f := s.Peers["floor"]["wall_s"]
			out[x.name+" / raw loop"] = Ratio{Gantry: s.WallS, Floor: f, Unit: "s", Ratio: s.WallS / f, Target: x.target, Met: s.WallS/f <= x.target}
		}
	}
	if s, ok := r.Scenarios["chain-1000"]; ok && s.ProcessStartMS > 0 {
		out["chain-1000 link / process start"] = Ratio{Gantry: s.PerNodeMS, Floor: s.ProcessStartMS, Unit: "ms", Ratio: s.LinkVsStart, Target: 2, Met: s.LinkVsStart <= 2}
	}
	return out
}

// workflowRun is a scenario of runs of one composition on one fresh
// stack.
type workflowRun struct {
	name  string
	comp  func() *dag.Composition
	runs  int
	stack stackConfig
	// after, when not nil, runs after each run (a floor measured between
	// runs), outside what the runs are measured to cost.
	after func() error
	// profileDir, when set, gets the stack's CPU profiles over the runs.
	profileDir string
}

// workflowBench runs w.comp w.runs times on one fresh stack.
func workflowBench(w workflowRun) (*Scenario, error) {
	w.stack.pprof = w.profileDir != ""
	st, err := startStack(w.stack)
	if err != nil {
		return nil, err
	}
	defer st.close()
	cl, err := st.connect()
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := waitServices(cl); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	idle, _ := st.rssByService()
	m, err := newMeter(st, w.profileDir != "")
	if err != nil {
		return nil, err
	}
	s := &Scenario{IdleRSSMB: idle, Status: "succeeded"}
	var lats []time.Duration
	var busy []float64
	for i := 0; i < w.runs; i++ {
		c := w.comp()
		c.Reset = true // every run does the work
		r, err := m.run(cl, c, 5*time.Minute)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.name, err)
		}
		if r.Status != dag.WorkflowSucceeded {
			s.Status = string(r.Status)
		}
		s.Runs = append(s.Runs, r.Wall.Seconds())
		busy = append(busy, r.Busy)
		lats = append(lats, r.Latencies...)
		s.Nodes = countNodes(c)
		fmt.Printf("  %s run %d: %.3fs (%s), %.2f cores busy\n", w.name, i+1, r.Wall.Seconds(), r.Status, r.Busy)
		if w.after != nil {
			if err := w.after(); err != nil {
				return nil, err
			}
		}
	}
	_, s.PeakRSSMB = st.rssByService()
	if err := m.record(context.Background(), s, w.profileDir, w.name); err != nil {
		return nil, fmt.Errorf("%s: %w", w.name, err)
	}
	if w.name == "chain-1000" || w.name == "ssh-500" {
		s.LinkMS = lastBreakdown
	}
	s.WallS = median(s.Runs)
	s.CoresBusy = median(busy)
	s.Min, s.Max = minMax(s.Runs)
	s.NodesPerS = float64(s.Nodes) / s.WallS
	s.PerNodeMS = s.WallS * 1000 / float64(s.Nodes)
	s.ReadyP50MS = float64(percentile(lats, 0.50).Microseconds()) / 1000
	s.ReadyP99MS = float64(percentile(lats, 0.99).Microseconds()) / 1000
	return s, nil
}

func countNodes(c *dag.Composition) int {
	n := 0
	for _, f := range c.Formulas {
		n += len(f.Nodes)
	}
	return n
}

// waitServices waits for the planner and the state-store to answer a
// request (an error reply is an answer: validating "{}" is one).
func waitServices(cl *client.Client) error {
	ctx := context.Background()
	c := cl.WithTimeout(time.Second)
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		_, e1 := c.Validate(ctx, []byte("{}"))
		_, e2 := c.List(ctx, 0)
		if answered(e1) && answered(e2) {
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("services did not come up")
}

// answered: err is nil or the service's own error reply.
func answered(err error) bool {
	var se *client.ServiceError
	return err == nil || errors.As(err, &se)
}

// sshRun is ssh-500 and its peers: how many runs of each.
type sshRun struct {
	binDir                         string
	runs, opensshRuns, ansibleRuns int
	profileDir                     string // see workflowRun
}

func sshBench(w sshRun) (*Scenario, error) {
	dir, _ := os.MkdirTemp("", "gantry-bench-ssh-")
	defer os.RemoveAll(dir)
	fleet, err := sshtest.Launch(dir, 5, sshtest.Options{})
	if err != nil {
		return nil, err
	}
	defer fleet.Close()
	fsNote := hostFSNote()
	if fsNote != "" {
		fmt.Println("  ssh-500: " + fsNote)
	}
	// The raw loop runs after each gantry run, so both see the same
	// machine (it is shared and its load changes).
	var floors, floorBusy []float64
	shaped, shapedBusy := map[string][]float64{}, map[string][]float64{} // sshFloorShapes' runs, by key
	after := func() error {
		cpu := readMachineCPU()
		d, err := rawLoop(ssh500Floor(fleet))
		if err != nil {
			return fmt.Errorf("floor: %w", err)
		}
		floors, floorBusy = append(floors, d.Seconds()), append(floorBusy, cpu.coresBusy())
		fmt.Printf("  ssh-500 peer floor run %d: %.3fs, %.2f cores busy\n", len(floors), d.Seconds(), floorBusy[len(floorBusy)-1])
		for _, shape := range sshFloorShapes {
			cpu := readMachineCPU()
			d, err := sshFloor(w.binDir, ssh500Floor(fleet), shape)
			if err != nil {
				return fmt.Errorf("%s: %w", shape.key(), err)
			}
			busy := cpu.coresBusy()
			shaped[shape.key()] = append(shaped[shape.key()], d.Seconds())
			shapedBusy[shape.key()] = append(shapedBusy[shape.key()], busy)
			fmt.Printf("  ssh-500 peer %s run %d: %.3fs (%.2fx the raw loop), %.2f cores busy\n", shape.key(), len(floors), d.Seconds(), d.Seconds()/floors[len(floors)-1], busy)
		}
		return nil
	}
	s, err := workflowBench(workflowRun{name: "ssh-500", comp: func() *dag.Composition { return ssh500(fleet) }, runs: w.runs,
		stack: stackConfig{binDir: w.binDir, sshKey: fleet.KeyFile, knownHosts: fleet.KnownHosts}, after: after, profileDir: w.profileDir})
	if err != nil {
		return nil, err
	}
	s.Target = "<= 1.10x the raw Go loop"
	s.Note = fsNote
	s.Peers = map[string]map[string]float64{}
	s.RatioVsPeer = map[string]float64{}
	peer := func(name string, n int, f func() (time.Duration, error)) error {
		var xs []float64
		for i := 0; i < n; i++ {
			d, err := f()
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			xs = append(xs, d.Seconds())
			fmt.Printf("  ssh-500 peer %s run %d: %.3fs\n", name, i+1, d.Seconds())
		}
		lo, hi := minMax(xs)
		s.Peers[name] = map[string]float64{"wall_s": median(xs), "min_s": lo, "max_s": hi, "runs": float64(len(xs))}
		s.RatioVsPeer[name] = s.WallS / median(xs)
		return nil
	}
	lo, hi := minMax(floors)
	s.Peers["floor"] = map[string]float64{"wall_s": median(floors), "min_s": lo, "max_s": hi, "runs": float64(len(floors)), "cores_busy": median(floorBusy)}
	s.RatioVsPeer["floor"] = s.WallS / median(floors)
	for k, xs := range shaped {
		lo, hi := minMax(xs)
		s.Peers[k] = map[string]float64{"wall_s": median(xs), "min_s": lo, "max_s": hi, "runs": float64(len(xs)), "cores_busy": median(shapedBusy[k]),
			"vs_raw_loop": median(xs) / median(floors)}
		s.RatioVsPeer[k] = s.WallS / median(xs)
	}
	if w.opensshRuns > 0 {
		if err := peer("openssh", w.opensshRuns, func() (time.Duration, error) { return openssh(fleet, dir) }); err != nil {
			return nil, err
		}
	}
	if w.ansibleRuns > 0 {
		if err := peer("ansible", w.ansibleRuns, func() (time.Duration, error) { return ansible(fleet, dir) }); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// devBench: `gantry dev` (one process) idle, and fanout-1000 on it once.
func devBench(binDir string) (map[string]float64, error) {
	dir, _ := os.MkdirTemp("", "gantry-bench-dev-")
	defer os.RemoveAll(dir)
	logf, _ := os.Create(filepath.Join(dir, "dev.log"))
	defer logf.Close()
	port := freePort()
	p, err := startProc("gantry dev", logf, nil, filepath.Join(binDir, "gantry"), "dev", "--port", fmt.Sprint(port), "--data-dir", filepath.Join(dir, "data"), "--log-level", "warn")
	if err != nil {
		return nil, err
	}
	defer p.stop()
	if err := waitPort(port); err != nil {
		return nil, err
	}
	cl, err := connectAs(fmt.Sprintf("nats://127.0.0.1:%d", port), filepath.Join(dir, "data", "auth", string(events.Operator)+".nk"))
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := waitServices(cl); err != nil {
		return nil, err
	}
	time.Sleep(2 * time.Second)
	idle, _ := rss(p.cmd.Process.Pid)
	c := fanout1000()
	r, err := runWorkflow(cl, c, 5*time.Minute)
	if err != nil {
		return nil, err
	}
	_, peak := rss(p.cmd.Process.Pid)
	fmt.Printf("  gantry dev fanout-1000: %.3fs, idle RSS %.1f MB, peak %.1f MB\n", r.Wall.Seconds(), idle, peak)
	return map[string]float64{"idle_rss_mb": idle, "peak_rss_mb": peak, "fanout_1000_wall_s": r.Wall.Seconds()}, nil
}

func printTable(r *results) {
	fmt.Printf("\nmachine: %s\n", r.Machine)
	fmt.Printf("%-12s %10s %17s %10s %10s %10s %10s  %s\n", "scenario", "wall (med)", "spread", "nodes/s", "ms/node", "p50 r->r", "p99 r->r", "target")
	for _, name := range []string{"plan-100k", "chain-1000", "fanout-1000", "fanout-1000x5", "wide-1000", "ssh-500", "executors-1", "executors-2", "executors-4", "fleet-1000"} {
		s, ok := r.Scenarios[name]
		if !ok {
			continue
		}
		fmt.Printf("%-12s %9.3fs %7.3f-%-7.3fs %10.0f %10.3f %9.2fms %9.2fms  %s\n", name, s.WallS, s.Min, s.Max, s.NodesPerS, s.PerNodeMS, s.ReadyP50MS, s.ReadyP99MS, s.Target)
		if x, ok := s.RatioVsPeer["speedup_vs_1"]; ok {
			fmt.Printf("  speed-up vs 1 executor: %.2fx\n", x)
		}
		peers := []string{"floor"}
		for _, f := range sshFloorShapes {
			peers = append(peers, f.key())
		}
		for _, peer := range append(peers, "openssh", "ansible") {
			if p, ok := s.Peers[peer]; ok {
				fmt.Printf("  vs %-8s %9.3fs %7.3f-%-7.3fs   gantry/%s = %.2fx\n", peer, p["wall_s"], p["min_s"], p["max_s"], peer, s.RatioVsPeer[peer])
				if b := p["cores_busy"]; b > 0 {
					fmt.Printf("    %s: machine cores busy %.2f (median of its runs)\n", peer, b)
				}
				if x := p["vs_raw_loop"]; x > 0 {
					fmt.Printf("    %s: %.2fx the raw loop (medians)\n", peer, x)
				}
			}
		}
		if len(s.IdleRSSMB) > 0 {
			fmt.Printf("  RSS MB idle %s; peak %s\n", fmtMap(s.IdleRSSMB), fmtMap(s.PeakRSSMB))
			fmt.Printf("  CPU s (all runs) nats-server %.1f, %s\n", s.CPUSeconds["nats-server"], fmtMap(s.CPUSeconds))
		}
		printPerNode(s)
		if s.ProcessStartMS > 0 {
			fmt.Printf("  vs process start %.3f ms %.3f-%.3f ms   link/process start = %.2fx\n", s.ProcessStartMS, s.ProcessStartMin, s.ProcessStartMax, s.LinkVsStart)
			if s.DurableStartMS > 0 {
				fmt.Printf("  vs durable start %.3f ms                link/durable start = %.2fx\n", s.DurableStartMS, s.PerNodeMS/s.DurableStartMS)
			}
			for _, f := range busFloorShapes {
				if ms, ok := s.BusFloorMS[f.key()]; ok {
					fmt.Printf("  vs bus floor, %-35s %.3f ms = %.2fx process start; link/bus floor = %.2fx\n", f.key()+":", ms, ms/s.ProcessStartMS, s.PerNodeMS/ms)
				}
			}
		}
		if len(s.LinkMS) > 0 {
			keys := make([]string, 0, len(s.LinkMS))
			for k := range s.LinkMS {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				fmt.Printf("  link: %-40s %.2f ms\n", k, s.LinkMS[k])
			}
		}
	}
	if r.DevMode != nil {
		fmt.Printf("gantry dev: idle RSS %.1f MB, peak %.1f MB, fanout-1000 %.3fs\n", r.DevMode["idle_rss_mb"], r.DevMode["peak_rss_mb"], r.DevMode["fanout_1000_wall_s"])
	}
	for _, k := range slices.Sorted(maps.Keys(r.Ratios)) {
		x := r.Ratios[k]
		met := "no"
		if x.Met {
			met = "yes"
		}
		fmt.Printf("ratio %-32s %8.3f%s / %.3f%s = %.2fx  (target <= %.2fx: %s)\n", k, x.Gantry, x.Unit, x.Floor, x.Unit, x.Ratio, x.Target, met)
	}
}

func fmtMap(m map[string]float64) string {
	var parts []string
	keys := make([]string, 0, len(m))
	for k := range m {
		if k != "nats-server" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s %.1f", k, m[k]))
	}
	return strings.Join(parts, ", ")
}
