package dag

import "sort"

// findCycles returns one cycle for every strongly connected component of
// more than one vertex, as the vertices in edge order starting from the
// component's smallest index. adj[i] lists the vertices i has an edge to.
// Self-edges must not be in adj. The result is deterministic.
func findCycles(adj [][]int) [][]int {
	comps := scc(adj)
	var out [][]int
	for _, comp := range comps {
		if len(comp) < 2 {
			continue
		}
		out = append(out, shortestCycle(adj, comp))
	}
	sort.Slice(out, func(i, j int) bool { return out[i][0] < out[j][0] })
	return out
}

// scc is Tarjan's algorithm without recursion, so a 100,000-vertex chain
// cannot exhaust the stack.
func scc(adj [][]int) [][]int {
	n := len(adj)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int
	var comps [][]int
	next := 0
	type frame struct{ v, edge int }
	for root := 0; root < n; root++ {
		if index[root] >= 0 {
			continue
		}
		call := []frame{{root, 0}}
		index[root], low[root] = next, next
		next++
		stack = append(stack, root)
		onStack[root] = true
		for len(call) > 0 {
			top := &call[len(call)-1]
			v := top.v
			if top.edge < len(adj[v]) {
				w := adj[v][top.edge]
				top.edge++
				if index[w] < 0 {
					index[w], low[w] = next, next
					next++
					stack = append(stack, w)
					onStack[w] = true
					call = append(call, frame{w, 0})
				} else if onStack[w] && index[w] < low[v] {
					low[v] = index[w]
				}
				continue
			}
			call = call[:len(call)-1]
			if len(call) > 0 {
				if p := call[len(call)-1].v; low[v] < low[p] {
					low[p] = low[v]
				}
			}
			if low[v] == index[v] {
				var comp []int
				for {
					w := stack[len(stack)-1]
					stack = stack[:len(stack)-1]
					onStack[w] = false
					comp = append(comp, w)
					if w == v {
						break
					}
				}
				sort.Ints(comp)
				comps = append(comps, comp)
			}
		}
	}
	return comps
}

// shortestCycle finds the shortest cycle through the smallest vertex of a
// strongly connected component, by breadth-first search inside it.
func shortestCycle(adj [][]int, comp []int) []int {
	in := make(map[int]bool, len(comp))
	for _, v := range comp {
		in[v] = true
	}
	start := comp[0]
	parent := map[int]int{start: -1}
	queue := []int{start}
	for len(queue) > 0 {
		u := queue[0]
		queue = queue[1:]
		for _, w := range adj[u] {
			if w == start {
				var rev []int
				for x := u; x != -1; x = parent[x] {
					rev = append(rev, x)
				}
				cyc := make([]int, len(rev))
				for i := range rev {
					cyc[i] = rev[len(rev)-1-i]
				}
				return cyc
			}
			if !in[w] {
				continue
			}
			if _, seen := parent[w]; !seen {
				parent[w] = u
				queue = append(queue, w)
			}
		}
	}
	return comp // unreachable for a real component
}

// levels orders an acyclic graph: deps[i] lists what i waits for. It returns
// each vertex's level (0 for no prerequisites, else 1 + the highest level
// among them) and a topological order that keeps index order within a
// level, so the result is deterministic.
func levels(deps [][]int) (level []int, order []int) {
	n := len(deps)
	level = make([]int, n)
	indeg := make([]int, n)
	dependents := make([][]int, n)
	for i, ds := range deps {
		indeg[i] = len(ds)
		for _, d := range ds {
			dependents[d] = append(dependents[d], i)
		}
	}
	order = make([]int, 0, n)
	var cur []int
	for i := 0; i < n; i++ {
		if indeg[i] == 0 {
			cur = append(cur, i)
		}
	}
	for l := 0; len(cur) > 0; l++ {
		var nextLevel []int
		for _, v := range cur {
			level[v] = l
			order = append(order, v)
			for _, w := range dependents[v] {
				indeg[w]--
				if indeg[w] == 0 {
					nextLevel = append(nextLevel, w)
				}
			}
		}
		sort.Ints(nextLevel)
		cur = nextLevel
	}
	return level, order
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
