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
	url   string
	dir   string
	natsd *proc
	svcs  []*proc
	logf  *os.File
	keys  *busauth.Keys
}

// connect connects as an operator, as a user of the stack would.
func (s *stack) connect() (*nats.Conn, error) {
	return connectAs(s.url, s.keys.SeedFile(events.Operator))
}

func connectAs(url, seedFile string) (*nats.Conn, error) {
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
	return nats.Connect(url, opt, quiet)
}

var serviceNames = []string{"planner", "executor", "health-gate", "state-store"}

func startStack(binDir, sshKey, knownHosts string) (*stack, error) {
	return startStackN(binDir, sshKey, knownHosts, 1, nil)
}

// startStackN starts nExec executor processes (named executor,
// executor-2...), each with execArgs.
func startStackN(binDir, sshKey, knownHosts string, nExec int, execArgs []string) (*stack, error) {
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
	s := &stack{dir: dir, logf: logf, keys: keys}
	port := freePort()
	s.url = fmt.Sprintf("nats://127.0.0.1:%d", port)
	// GANTRY_BENCH_PPROF=1 serves pprof: nats-server on 127.0.0.1:6065, the
	// services on 6061-6064 in serviceNames order (see docs/performance.md);
	// GANTRY_BENCH_PPROF=<port> starts at that port instead of 6061.
	pprof, pprofBase := pprofPorts()
	natsArgs := []string{"-c", conf, "-a", "127.0.0.1", "-p", strconv.Itoa(port), "-js", "-sd", filepath.Join(dir, "js")}
	if pprof {
		natsArgs = append(natsArgs, "--profile", strconv.Itoa(pprofBase+4))
	}
	// GANTRY_BENCH_MONITOR=<port> serves nats-server's monitoring
	// endpoints (/varz, /jsz, /connz) on 127.0.0.1:<port>.
	if m := os.Getenv("GANTRY_BENCH_MONITOR"); m != "" {
		natsArgs = append(natsArgs, "-m", m)
	}
	if s.natsd, err = startProc("nats-server", logf, nil, append([]string{filepath.Join(binDir, "nats-server")}, natsArgs...)...); err != nil {
		return nil, err
	}
	if err := waitPort(port); err != nil {
		s.close()
		return nil, err
	}
	// the local scenarios run commands as the executor (--allow-local)
	env := []string{"NATS_URL=" + s.url, "GANTRY_SSH_KEY=" + sshKey, "GANTRY_KNOWN_HOSTS=" + knownHosts, "GANTRY_ALLOW_LOCAL=1"}
	for i, name := range serviceNames {
		env := append(env[:len(env):len(env)], "NATS_NKEY="+keys.SeedFile(events.Identity(name)))
		if pprof {
			env = append(env[:len(env):len(env)], fmt.Sprintf("GANTRY_PPROF=127.0.0.1:%d", pprofBase+i))
		}
		n := 1
		var args []string
		if name == "executor" {
			n, args = nExec, execArgs
		}
		for k := 0; k < n; k++ {
			pname := name
			if k > 0 {
				pname = fmt.Sprintf("%s-%d", name, k+1)
			}
			p, err := startProc(pname, logf, env, append([]string{filepath.Join(binDir, name)}, args...)...)
			if err != nil {
				s.close()
				return nil, err
			}
			s.svcs = append(s.svcs, p)
		}
	}
	return s, nil
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
