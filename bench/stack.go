package main

import (
	"bufio"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/busauth"
	"github.com/gantry-dev/gantry/pkg/client"
	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/nats-io/nats.go"
)

// proc is a process the harness started (and alone stops, by PID).
type proc struct {
	name string
	cmd  *exec.Cmd
}

func startProc(name string, logf *os.File, env []string, args ...string) (*proc, error) {
	c := exec.Command(args[0], args[1:]...)
	c.Env = append(os.Environ(), env...)
	c.Stdout, c.Stderr = logf, logf
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	return &proc{name: name, cmd: c}, nil
}

func (p *proc) stop() {
	if p == nil || p.cmd == nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = p.cmd.Process.Kill()
		<-done
	}
}

// rss returns the current and peak resident set of a process, in MB.
func rss(pid int) (cur, peak float64) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 2 {
			continue
		}
		kb, _ := strconv.ParseFloat(fields[1], 64)
		switch fields[0] {
		case "VmRSS:":
			cur = kb / 1024
		case "VmHWM:":
			peak = kb / 1024
		}
	}
	return cur, peak
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func waitPort(port int) error {
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), 200*time.Millisecond); err == nil {
			c.Close()
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return fmt.Errorf("nothing listening on port %d", port)
}

// stack is nats-server with file storage and the four services, each its
// own process, as in production.
type stack struct {
	url     string
	monitor string // nats-server's monitoring endpoints (/jsz), on loopback
	dir     string
	natsd   *proc
	svcs    []*proc
	logf    *os.File
	keys    *busauth.Keys
	pprof   map[string]string // process -> host:port of its pprof, when served
}

// connect connects as an operator, as a user of the stack would, and
// talks to the services through the gantry client.
func (s *stack) connect() (*client.Client, error) {
	return connectAs(s.url, s.keys.SeedFile(events.Operator))
}

// requestTimeout is how long a request to the services waits for its
// reply (a submit of a large composition takes a while).
const requestTimeout = 30 * time.Second

func connectAs(url, seedFile string) (*client.Client, error) {
	opt, err := nats.NkeyOptionFromSeed(seedFile)
	if err != nil {
		return nil, err
	}
	// An ordered consumer deletes itself when the reader stops, which people
	// may not do on the bus (the server removes it once idle): that refusal
	// is expected, anything else is printed.
	quiet := nats.ErrorHandler(func(_ *nats.Conn, _ *nats.Subscription, err error) {
		if errors.Is(err, nats.ErrPermissionViolation) && strings.Contains(err.Error(), "$JS.API.CONSUMER.DELETE.") {
			return
		}
		fmt.Fprintln(os.Stderr, "nats:", err)
	})
	nc, err := nats.Connect(url, opt, quiet)
	if err != nil {
		return nil, err
	}
	return client.New(nc, requestTimeout), nil
}

var serviceNames = []string{"planner", "executor", "health-gate", "state-store"}

// stackConfig is what a stack runs with.
type stackConfig struct {
	binDir     string
	sshKey     string // the executor's SSH key and known_hosts
	knownHosts string
	executors  int      // executor processes (named executor, executor-2...); 0 is 1
	execArgs   []string // each executor's arguments
	// pprof makes every process serve pprof on a free loopback port
	// (stack.pprof), for the bench's -profile.
	pprof bool
}

func startStack(cfg stackConfig) (*stack, error) {
	dir, err := os.MkdirTemp("", "gantry-bench-")
	if err != nil {
		return nil, err
	}
	logf, err := os.Create(filepath.Join(dir, "processes.log"))
	if err != nil {
		return nil, err
	}
	keys, err := busauth.LoadOrCreate(filepath.Join(dir, "auth"))
	if err != nil {
		return nil, err
	}
	conf, err := keys.WriteServerConfig(busauth.ServerOptions{})
	if err != nil {
		return nil, err
	}
	s := &stack{dir: dir, logf: logf, keys: keys, pprof: map[string]string{}}
	port := freePort()
	s.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	pprofAddr := pprofAddrs(cfg.pprof)
	natsArgs := []string{"-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js")}
	if a := pprofAddr(); a != "" {
		_, p, _ := strings.Cut(a, ":")
		natsArgs = append(natsArgs, "--profile", p)
		s.pprof["nats-server"] = a
	}
	// The monitoring endpoints (/jsz: the streams' counts) are always
	// served, on loopback (the -a address): GANTRY_BENCH_MONITOR=<port>
	// picks the port, to read /varz or /connz by hand as well.
	mport := os.Getenv("GANTRY_BENCH_MONITOR")
	if mport == "" {
		mport = strconv.Itoa(freePort())
	}
	natsArgs = append(natsArgs, "-m", mport)
	s.monitor = "http://127.0.0.1:" + mport
	if s.natsd, err = startProc("nats-server", logf, nil, append([]string{filepath.Join(cfg.binDir, "nats-server")}, natsArgs...)...); err != nil {
		return nil, err
	}
	if err := waitPort(port); err != nil {
		s.close()
		return nil, err
	}
	// the local scenarios run commands as the executor (--allow-local)
	env := []string{"NATS_URL=" + s.url, "GANTRY_SSH_KEY=" + cfg.sshKey, "GANTRY_KNOWN_HOSTS=" + cfg.knownHosts, "GANTRY_ALLOW_LOCAL=1"}
	for _, name := range serviceNames {
		env := append(env[:len(env):len(env)], "NATS_NKEY="+keys.SeedFile(events.Identity(name)))
		n := 1
		var args []string
		if name == "executor" {
			n, args = max(cfg.executors, 1), cfg.execArgs
		}
		for k := 0; k < n; k++ {
			pname := name
			if k > 0 {
				pname = fmt.Sprintf("%s-%d", name, k+1)
			}
			penv := env
			if a := pprofAddr(); a != "" {
				penv = append(env[:len(env):len(env)], "GANTRY_PPROF="+a)
				s.pprof[pname] = a
			}
			p, err := startProc(pname, logf, penv, append([]string{filepath.Join(cfg.binDir, name)}, args...)...)
			if err != nil {
				s.close()
				return nil, err
			}
			s.svcs = append(s.svcs, p)
		}
	}
	return s, nil
}

// pprofAddrs returns where each process of a stack, in the order started
// (nats-server first), serves pprof: nowhere (""), unless asked for.
// GANTRY_BENCH_PPROF=1 serves it on 127.0.0.1:6061 and up, the services
// first (6061-6064 in serviceNames order, more executors after) and
// nats-server last (see docs/performance.md); GANTRY_BENCH_PPROF=<port>
// starts at that port instead of 6061. Else want (the bench's -profile)
// takes free ports.
func pprofAddrs(want bool) func() string {
	on, base := pprofPorts()
	if !on && !want {
		return func() string { return "" }
	}
	if !on {
		return func() string { return fmt.Sprintf("127.0.0.1:%d", freePort()) }
	}
	// nats-server asks first and gets base+4, as it always has; the
	// services base, base+1... stepping over base+4.
	n := 0
	return func() string {
		p := base + n - 1
		switch {
		case n == 0:
			p = base + 4
		case p >= base+4:
			p++
		}
		n++
		return fmt.Sprintf("127.0.0.1:%d", p)
	}
}

// pprofPorts reads GANTRY_BENCH_PPROF: empty serves no pprof; a port
// number (above 1024) is the first of the five ports; anything else means
// 6061.
func pprofPorts() (bool, int) {
	v := os.Getenv("GANTRY_BENCH_PPROF")
	if v == "" {
		return false, 0
	}
	if n, err := strconv.Atoi(v); err == nil && n > 1024 && n < 65531 {
		return true, n
	}
	return true, 6061
}

func (s *stack) close() {
	for _, p := range s.svcs {
		p.stop()
	}
	s.natsd.stop()
	s.logf.Close()
	if os.Getenv("GANTRY_BENCH_KEEP") != "" {
		fmt.Println("  kept", s.dir)
		return
	}
	os.RemoveAll(s.dir)
}

// cpuSeconds is the user+system CPU time a process has used.
func cpuSeconds(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseFloat(f[11], 64)
	sy, _ := strconv.ParseFloat(f[12], 64)
	return (u + sy) / 100 // USER_HZ
}

// cpuByProcess returns the CPU seconds of nats-server and each service.
func (s *stack) cpuByProcess() map[string]float64 {
	m := map[string]float64{"nats-server": cpuSeconds(s.natsd.cmd.Process.Pid)}
	for _, p := range s.svcs {
		m[p.name] = cpuSeconds(p.cmd.Process.Pid)
	}
	return m
}

// rssByService returns each service's current and peak RSS in MB.
func (s *stack) rssByService() (cur, peak map[string]float64) {
	cur, peak = map[string]float64{}, map[string]float64{}
	for _, p := range s.svcs {
		cur[p.name], peak[p.name] = rss(p.cmd.Process.Pid)
	}
	return cur, peak
}
