package main

import (
	"context"
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// waiting200: 200 hosts (transport local), one formula each of two
// chained `sleep 0.2` nodes: the nodes mostly wait, so an executor's
// --max-formulas, not the CPU, bounds the throughput.
func waiting200() *dag.Composition {
	c := &dag.Composition{Name: "waiting200", Hosts: map[string]dag.Host{}}
	for i := 0; i < 200; i++ {
		h := fmt.Sprintf("h%03d", i)
		c.Hosts[h] = dag.Host{Transport: dag.TransportLocal}
		c.Formulas = append(c.Formulas, dag.Formula{ID: h, Server: h, Nodes: []dag.Node{
			{Name: "a", Run: "sleep 0.2"},
			{Name: "b", Run: "sleep 0.2", DependsOn: []string{"a"}},
		}})
	}
	return c
}

// executorsBench runs waiting200 on a stack with 1, 2 and 4 executors
// (--max-formulas 8 each); one run per N.
func executorsBench(binDir string, runs int) (map[string]*Scenario, error) {
	out := map[string]*Scenario{}
	var base float64
	for _, n := range []int{1, 2, 4} {
		st, err := startStack(stackConfig{binDir: binDir, executors: n, execArgs: []string{"--max-formulas", "8", "--per-host", "8"}})
		if err != nil {
			return nil, err
		}
		s, err := func() (*Scenario, error) {
			defer st.close()
			cl, err := st.connect()
			if err != nil {
				return nil, err
			}
			defer cl.Close()
			if err := waitServices(cl); err != nil {
				return nil, err
			}
			time.Sleep(2 * time.Second) // every executor subscribed
			m, err := newMeter(st, false)
			if err != nil {
				return nil, err
			}
			s := &Scenario{Status: "succeeded", Target: "wall(1)/wall(N) close to N"}
			for i := 0; i < runs; i++ {
				c := waiting200()
				c.Reset = true
				r, err := m.run(cl, c, 5*time.Minute)
				if err != nil {
					return nil, err
				}
				if r.Status != dag.WorkflowSucceeded {
					s.Status = string(r.Status)
				}
				s.Runs = append(s.Runs, r.Wall.Seconds())
				s.Nodes = countNodes(c)
				fmt.Printf("  executors-%d run %d: %.3fs (%s)\n", n, i+1, r.Wall.Seconds(), r.Status)
			}
			_, s.PeakRSSMB = st.rssByService()
			return s, m.record(context.Background(), s, "", "")
		}()
		if err != nil {
			return nil, fmt.Errorf("executors-%d: %w", n, err)
		}
		s.WallS = median(s.Runs)
		s.Min, s.Max = minMax(s.Runs)
		s.NodesPerS = float64(s.Nodes) / s.WallS
		s.PerNodeMS = s.WallS * 1000 / float64(s.Nodes)
		if n == 1 {
			base = s.WallS
		}
		s.RatioVsPeer = map[string]float64{"speedup_vs_1": base / s.WallS}
		s.Note = fmt.Sprintf("200 hosts x 2 chained `sleep 0.2`, %d executor(s), --max-formulas 8 each", n)
		out[fmt.Sprintf("executors-%d", n)] = s
	}
	return out, nil
}
