package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/dag"
	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
)

// fleet-1000: 1,000 hosts, each its own loopback address (127.1.i.j) and
// known_hosts entry, served by 67 sshd (15 addresses each: sshd listens
// on at most 16 sockets); one formula of one `true` per host.
const fleetHosts, fleetPerSSHD = 1000, 15

type fleet1000 struct {
	f     *sshtest.Fleet
	addrs []string // host:port, one per host
	known string
	user  string
	key   string
}

func launchFleet1000(dir string) (*fleet1000, error) {
	n := (fleetHosts + fleetPerSSHD - 1) / fleetPerSSHD
	port := freePort()
	opts := sshtest.Options{HostConfig: map[int][]string{}, ExtraConfig: []string{"MaxStartups 1000:30:2000"}}
	var addrs []string
	for i := 0; i < n; i++ {
		for j := 1; j <= fleetPerSSHD && len(addrs) < fleetHosts; j++ {
			a := fmt.Sprintf("127.1.%d.%d:%d", i, j, port)
			opts.HostConfig[i] = append(opts.HostConfig[i], "ListenAddress "+a)
			addrs = append(addrs, a)
		}
	}
	f, err := sshtest.Launch(dir, n, opts)
	if err != nil {
		return nil, err
	}
	// one known_hosts line per host address, with its sshd's key
	lines := strings.Split(strings.TrimSpace(mustRead(f.KnownHosts)), "\n")
	var kh strings.Builder
	for k, a := range addrs {
		key := strings.SplitN(lines[k/fleetPerSSHD], " ", 2)[1]
		host, p, _ := strings.Cut(a, ":")
		fmt.Fprintf(&kh, "[%s]:%s %s\n", host, p, key)
	}
	known := filepath.Join(dir, "known_hosts_1000")
	if err := os.WriteFile(known, []byte(kh.String()), 0o600); err != nil {
		f.Close()
		return nil, err
	}
	return &fleet1000{f: f, addrs: addrs, known: known, user: f.User, key: f.KeyFile}, nil
}

// sshdCPU is the CPU seconds of the fleet's sshd: the listeners and all
// their descendants (live connections, which sshd puts in sessions of
// their own, and through cutime/cstime the ones already reaped).
func (fl *fleet1000) sshdCPU() float64 {
	in := map[string]bool{}
	for _, h := range fl.f.Hosts {
		if b, err := os.ReadFile(filepath.Join(h.Dir, "sshd.pid")); err == nil {
			in[strings.TrimSpace(string(b))] = true
		}
	}
	type pst struct {
		ppid string
		cpu  float64
	}
	procs := map[string]pst{}
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
		if len(f) < 15 {
			continue
		}
		p := pst{ppid: f[1]}
		for _, k := range []int{11, 12, 13, 14} { // utime stime cutime cstime
			var v float64
			fmt.Sscan(f[k], &v)
			p.cpu += v / 100
		}
		procs[e.Name()] = p
	}
	total := 0.0
	for pid, p := range procs {
		for cur, hops := pid, 0; cur != "" && cur != "0" && hops < 64; cur, hops = procs[cur].ppid, hops+1 {
			if in[cur] {
				total += p.cpu
				break
			}
		}
	}
	return total
}

func mustRead(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (fl *fleet1000) composition() *dag.Composition {
	c := &dag.Composition{Name: "fleet1000", Hosts: map[string]dag.Host{}}
	for i, a := range fl.addrs {
		h := fmt.Sprintf("h%04d", i)
		c.Hosts[h] = dag.Host{Address: a, User: fl.user}
		c.Formulas = append(c.Formulas, dag.Formula{ID: h, Server: h, Nodes: []dag.Node{{Name: "n", Run: "true", Timeout: dag.Duration(time.Minute)}}})
	}
	return c
}

// childUsage runs a command and returns its wall time, the CPU time of it
// and its waited-for children, and the largest max RSS among them (MB).
func childUsage(cmd *exec.Cmd) (wall time.Duration, cpu float64, maxRSS float64, out []byte, err error) {
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	start := time.Now()
	err = cmd.Run()
	wall = time.Since(start)
	if ru, ok := cmd.ProcessState.SysUsage().(*syscall.Rusage); ok && ru != nil {
		cpu = time.Duration(ru.Utime.Nano() + ru.Stime.Nano()).Seconds()
		maxRSS = float64(ru.Maxrss) / 1024
	}
	return wall, cpu, maxRSS, buf.Bytes(), err
}

// fleetParallel is how many hosts fleet-1000 works on at a time: the
// executor's --max-formulas, the raw loop's and OpenSSH's parallelism.
const fleetParallel = 50

// fleetRun is fleet-1000: gantry once, then its floor and peers.
type fleetRun struct {
	binDir       string
	maxFormulas  int    // the executor's --max-formulas
	ansibleHosts int    // hosts Ansible runs on (its time is scaled to 1,000)
	profileDir   string // see workflowRun
}

func fleetBench(w fleetRun) (*Scenario, error) {
	dir, _ := os.MkdirTemp("", "gantry-bench-fleet-")
	defer os.RemoveAll(dir)
	t0 := time.Now()
	fl, err := launchFleet1000(dir)
	if err != nil {
		return nil, err
	}
	defer fl.f.Close()
	fmt.Printf("  fleet-1000: %d sshd for %d hosts up in %.1fs\n", len(fl.f.Hosts), len(fl.addrs), time.Since(t0).Seconds())

	st, err := startStack(stackConfig{binDir: w.binDir, sshKey: fl.key, knownHosts: fl.known,
		execArgs: []string{"--max-formulas", strconv.Itoa(w.maxFormulas)}, pprof: w.profileDir != ""})
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
	sshd0 := fl.sshdCPU()
	c := fl.composition()
	r, err := m.run(cl, c, 3*time.Minute)
	if err != nil {
		return nil, err
	}
	sshd1 := fl.sshdCPU()
	_, peak := st.rssByService()
	fmt.Printf("  fleet-1000 gantry: %.3fs (%s)\n", r.Wall.Seconds(), r.Status)
	s := &Scenario{Status: string(r.Status), Runs: []float64{r.Wall.Seconds()}, WallS: r.Wall.Seconds(), Min: r.Wall.Seconds(), Max: r.Wall.Seconds(),
		Nodes: fleetHosts, IdleRSSMB: idle, PeakRSSMB: peak, Target: "<= 1.5x the raw Go loop",
		Peers: map[string]map[string]float64{}, RatioVsPeer: map[string]float64{}}
	if err := m.record(context.Background(), s, w.profileDir, "fleet-1000"); err != nil {
		return nil, fmt.Errorf("fleet-1000: %w", err)
	}
	s.NodesPerS = float64(s.Nodes) / s.WallS
	s.PerNodeMS = s.WallS * 1000 / float64(s.Nodes)
	s.Peers["gantry-executor"] = map[string]float64{"cpu_s": s.CPUSeconds["executor"], "cpu_ms_per_host": s.CPUSeconds["executor"] * 1000 / fleetHosts,
		"max_rss_mb": peak["executor"], "rss_kb_per_host": (peak["executor"] - idle["executor"]) * 1024 / fleetHosts, "sshd_cpu_s": sshd1 - sshd0}
	fmt.Printf("  fleet-1000 gantry: executor CPU %.2fs, sshd CPU %.2fs\n", s.CPUSeconds["executor"], sshd1-sshd0)

	// The floor: a raw x/crypto/ssh loop over the same hosts, as many at
	// a time, the same command, right after gantry's run.
	sshd0 = fl.sshdCPU()
	fwall, err := rawLoop(rawTarget{keyFile: fl.key, knownHosts: fl.known, user: fl.user, addrs: fl.addrs, parallel: w.maxFormulas, perHost: 1, command: "true"})
	sshd1 = fl.sshdCPU()
	if err != nil {
		return nil, fmt.Errorf("fleet-1000 floor: %w", err)
	}
	fmt.Printf("  fleet-1000 floor (raw x/crypto/ssh loop, %d at a time): %.3fs, sshd CPU %.2fs\n", w.maxFormulas, fwall.Seconds(), sshd1-sshd0)
	s.Peers["floor"] = map[string]float64{"wall_s": fwall.Seconds(), "min_s": fwall.Seconds(), "max_s": fwall.Seconds(), "runs": 1, "sshd_cpu_s": sshd1 - sshd0}
	s.RatioVsPeer["floor"] = s.WallS / fwall.Seconds()

	// OpenSSH: xargs -P 50, one `ssh host true` (its own connection) per host
	var list strings.Builder
	for _, a := range fl.addrs {
		host, p, _ := strings.Cut(a, ":")
		fmt.Fprintf(&list, "%s %s\n", host, p)
	}
	listFile := filepath.Join(dir, "hosts.txt")
	os.WriteFile(listFile, []byte(list.String()), 0o600)
	sshCmd := fmt.Sprintf("ssh -i %s -o UserKnownHostsFile=%s -o StrictHostKeyChecking=yes -o BatchMode=yes -p \"$2\" %s@\"$1\" true", fl.key, fl.known, fl.user)
	cmd := exec.Command("xargs", "-P", strconv.Itoa(fleetParallel), "-L", "1", "sh", "-c", sshCmd, "sh")
	cmd.Stdin = strings.NewReader(list.String())
	sshd0 = fl.sshdCPU()
	wall, cpu, mrss, out, err := childUsage(cmd)
	sshd1 = fl.sshdCPU()
	if err != nil {
		return nil, fmt.Errorf("openssh: %v: %s", err, tailStr(string(out), 1500))
	}
	fmt.Printf("  fleet-1000 openssh (xargs -P 50): %.3fs, CPU %.2fs, max RSS of one process %.1f MB\n", wall.Seconds(), cpu, mrss)
	s.Peers["openssh"] = map[string]float64{"wall_s": wall.Seconds(), "min_s": wall.Seconds(), "max_s": wall.Seconds(), "runs": 1, "cpu_s": cpu,
		"cpu_ms_per_host": cpu * 1000 / fleetHosts, "max_rss_mb": mrss, "sshd_cpu_s": sshd1 - sshd0}
	fmt.Printf("  fleet-1000 openssh: sshd CPU %.2fs\n", sshd1-sshd0)
	s.RatioVsPeer["openssh"] = s.WallS / wall.Seconds()

	if _, err := exec.LookPath("ansible-playbook"); err == nil && w.ansibleHosts > 0 {
		n := min(w.ansibleHosts, fleetHosts)
		var inv strings.Builder
		inv.WriteString("[fleet]\n")
		for i, a := range fl.addrs[:n] {
			host, p, _ := strings.Cut(a, ":")
			fmt.Fprintf(&inv, "h%04d ansible_host=%s ansible_port=%s ansible_user=%s\n", i, host, p, fl.user)
		}
		pb := "- hosts: fleet\n  gather_facts: false\n  tasks:\n    - name: t\n      command: \"true\"\n      changed_when: false\n"
		cfg := fmt.Sprintf("[defaults]\nforks = 50\nhost_key_checking = True\ninterpreter_python = /usr/bin/python3\nprivate_key_file = %s\n[ssh_connection]\npipelining = True\nssh_args = -o UserKnownHostsFile=%s -o ControlMaster=no\n", fl.key, fl.known)
		for name, body := range map[string]string{"inventory": inv.String(), "playbook.yml": pb, "ansible.cfg": cfg} {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
				return nil, err
			}
		}
		cmd := exec.Command("ansible-playbook", "-i", "inventory", "playbook.yml")
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+filepath.Join(dir, "ansible.cfg"), "ANSIBLE_NOCOLOR=1")
		wall, cpu, mrss, out, err := childUsage(cmd)
		if err != nil {
			return nil, fmt.Errorf("ansible-playbook: %v\n%s", err, tailStr(string(out), 2000))
		}
		k := float64(fleetHosts) / float64(n)
		fmt.Printf("  fleet-1000 ansible (forks 50) on %d hosts: %.3fs, CPU %.2fs, max RSS %.1f MB; x%.0f: %.1fs\n", n, wall.Seconds(), cpu, mrss, k, wall.Seconds()*k)
		s.Peers["ansible"] = map[string]float64{"wall_s": wall.Seconds() * k, "min_s": wall.Seconds() * k, "max_s": wall.Seconds() * k, "runs": 1,
			"hosts_run": float64(n), "measured_wall_s": wall.Seconds(), "cpu_s": cpu * k, "cpu_ms_per_host": cpu * 1000 / float64(n), "max_rss_mb": mrss}
		s.RatioVsPeer["ansible"] = s.WallS / (wall.Seconds() * k)
		if n < fleetHosts {
			s.Note = fmt.Sprintf("ansible ran on %d hosts, its wall and CPU scaled by %.0f", n, k)
		}
	}
	return s, nil
}
