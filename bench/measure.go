package main

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"time"

	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/dag"
)

// snapshot is what a stack's processes had spent and stored at one
// moment.
type snapshot struct {
	cpu     map[string]float64 // CPU seconds, by process
	streams streamStates
	inBytes uint64 // bytes nats-server received from its clients
}

// snapshot reads the stack's CPU, stream counts and bytes in now.
func (s *stack) snapshot(ctx context.Context) (snapshot, error) {
	st, err := readStreams(ctx, s.monitor)
	if err != nil {
		return snapshot{}, err
	}
	in, err := readInBytes(ctx, s.monitor)
	return snapshot{cpu: s.cpuByProcess(), streams: st, inBytes: in}, err
}

// settled waits for the streams to stop growing (settle), then reads
// the CPU and bytes in: a run's end as far as its cost goes.
func (s *stack) settled(ctx context.Context) (snapshot, error) {
	st, err := settle(ctx, s.monitor)
	if err != nil {
		return snapshot{}, err
	}
	in, err := readInBytes(ctx, s.monitor)
	return snapshot{cpu: s.cpuByProcess(), streams: st, inBytes: in}, err
}

// usage is what the stack spent over the runs measured: each run from
// just before its submission to its end, once the streams settled, so
// neither the stack's start nor what the bench does between runs counts.
type usage struct {
	runs    int
	cpu     map[string]float64 // CPU seconds, by process
	stored  map[string]uint64  // messages stored, by stream
	inBytes uint64             // bytes nats-server received
}

func newUsage() *usage {
	return &usage{cpu: map[string]float64{}, stored: map[string]uint64{}}
}

// add counts one run, from before to after.
func (u *usage) add(before, after snapshot) {
	u.runs++
	for p, v := range after.cpu {
		u.cpu[p] += v - before.cpu[p]
	}
	for st, n := range storedBetween(before.streams, after.streams) {
		u.stored[st] += n
	}
	u.inBytes += after.inBytes - before.inBytes
}

// perNode divides the usage by the nodes of all runs: CPU ms per node by
// process and messages stored per node by stream (per link, in a chain).
func (u *usage) perNode(nodes int) (cpuMS, stored map[string]float64) {
	cpuMS, stored = map[string]float64{}, map[string]float64{}
	n := float64(nodes * u.runs)
	if n == 0 {
		return cpuMS, stored
	}
	for p, v := range u.cpu {
		cpuMS[p] = v * 1000 / n
	}
	for st, v := range u.stored {
		stored[st] = float64(v) / n
	}
	return cpuMS, stored
}

// record puts the usage in the scenario's figures.
func (u *usage) record(s *Scenario) {
	s.CPUSeconds = maps.Clone(u.cpu)
	s.CPUMSPerNode, s.StoredPerNode = u.perNode(s.Nodes)
	s.CPUMSPerNodeTotal, s.StoredPerNodeTotal = sum(s.CPUMSPerNode), sum(s.StoredPerNode)
	if n := s.Nodes * u.runs; n > 0 {
		s.BusKBPerNode = float64(u.inBytes) / 1024 / float64(n)
	}
}

func sum(m map[string]float64) float64 {
	t := 0.0
	for _, v := range m {
		t += v
	}
	return t
}

// meter runs workflows on a stack and counts what each run costs it,
// taking CPU profiles of its processes during the runs when asked to.
type meter struct {
	st   *stack
	use  *usage
	prof *profiler // nil: no profiles
}

// newMeter meters runs on st; profile takes CPU profiles of its
// processes (the stack must serve pprof: stackConfig.pprof).
func newMeter(st *stack, profile bool) (*meter, error) {
	m := &meter{st: st, use: newUsage()}
	if !profile {
		return m, nil
	}
	if len(st.pprof) == 0 {
		return nil, fmt.Errorf("profiles: the stack serves no pprof")
	}
	var err error
	m.prof, err = newProfiler(st.pprof)
	return m, err
}

// run runs one workflow: from just before its submission to its end
// with the streams settled, it counts the stack's CPU and stored
// messages (and profiles it); then it reads the ready -> running
// latencies back from the events, outside the count.
func (m *meter) run(cl *client.Client, c *dag.Composition, timeout time.Duration) (*runResult, error) {
	ctx := context.Background()
	before, err := m.st.snapshot(ctx)
	if err != nil {
		return nil, err
	}
	if m.prof != nil {
		m.prof.start()
	}
	r, err := runWorkflow(cl, c, timeout)
	if err != nil {
		if m.prof != nil {
			_ = m.prof.stop()
		}
		return nil, err
	}
	after, err := m.st.settled(ctx)
	if m.prof != nil {
		err = errors.Join(err, m.prof.stop())
	}
	if err != nil {
		return nil, err
	}
	m.use.add(before, after)
	r.Latencies, err = latencies(cl.Conn(), r, c)
	return r, err
}

// record puts what the runs cost in the scenario's figures (s.Nodes set:
// nodes per run), and with profiles, writes them to dir as
// <scenario>-<process>.pb.gz and puts their CPU by step per node in s.
func (m *meter) record(ctx context.Context, s *Scenario, dir, scenario string) error {
	m.use.record(s)
	if m.prof == nil {
		return nil
	}
	files, err := m.prof.merge(ctx, dir, scenario)
	if err != nil {
		return err
	}
	s.Profiles = files
	s.ProfileMSPerNode = map[string]map[string]float64{}
	n := float64(s.Nodes * m.use.runs)
	for proc, f := range files {
		by, _, err := stepSeconds(ctx, f)
		if err != nil {
			return err
		}
		ms := map[string]float64{}
		for k, v := range by {
			ms[k] = v * 1000 / n
		}
		s.ProfileMSPerNode[proc] = ms
	}
	return nil
}

// printPerNode prints what a node cost the stack: CPU ms by process and
// messages stored by stream, and with profiles each process's CPU ms by
// step.
func printPerNode(s *Scenario) {
	same := func(k string) string { return k }
	if len(s.CPUMSPerNode) > 0 {
		fmt.Printf("  CPU ms per node %s\n", fmtPerNode(s.CPUMSPerNode, same, 2))
	}
	if len(s.StoredPerNode) > 0 {
		fmt.Printf("  stored msgs per node %s\n", fmtPerNode(s.StoredPerNode, storeLabel, 2))
	}
	if s.BusKBPerNode > 0 {
		fmt.Printf("  bus KB per node %.2f (what nats-server received from its clients)\n", s.BusKBPerNode)
	}
	if s.CoresBusy > 0 {
		fmt.Printf("  machine cores busy %.2f of %d (median of the runs: every process, sshd and shells too)\n", s.CoresBusy, runtime.NumCPU())
	}
	for _, proc := range slices.Sorted(maps.Keys(s.ProfileMSPerNode)) {
		fmt.Printf("  profile %s, CPU ms per node %s\n", proc, fmtPerNode(s.ProfileMSPerNode[proc], same, 3))
	}
}
