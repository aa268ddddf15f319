// Package sshtest starts real OpenSSH sshd processes on 127.0.0.1 for
// integration tests, with throwaway host and user keys and a known_hosts
// file. It installs openssh-server with apt-get when sshd is missing.
package sshtest

import (
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// ensurePackage installs Debian's package pkg with apt-get (once per
// process, guarded by once) when the file binary is missing, and fails
// the test when it is still missing.
func ensurePackage(t testing.TB, once *sync.Once, binary, pkg string) {
	t.Helper()
	once.Do(func() {
		if _, err := os.Stat(binary); err == nil {
			return
		}
		t.Logf("%s missing: installing %s with apt-get", binary, pkg)
		for _, args := range [][]string{{"update", "-qq"}, {"install", "-y", "-qq", pkg}} {
			cmd := exec.Command("apt-get", args...)
			cmd.Env = append(os.Environ(), "DEBIAN_FRONTEND=noninteractive")
			if out, err := cmd.CombinedOutput(); err != nil {
				t.Logf("apt-get %v: %v\n%s", args, err, out)
			}
		}
	})
	if _, err := os.Stat(binary); err != nil {
		t.Fatalf("%s is not available and could not be installed (%s): %v", binary, pkg, err)
	}
}

// SSHD is the OpenSSH server binary.
const SSHD = "/usr/sbin/sshd"

var installOnce sync.Once

// EnsureSSHD installs openssh-server when sshd is missing.
func EnsureSSHD(t testing.TB) {
	t.Helper()
	ensurePackage(t, &installOnce, SSHD, "openssh-server")
	_ = os.MkdirAll("/run/sshd", 0o755) // privilege separation directory
}

// Fleet is a set of sshd hosts sharing one user key and known_hosts file.
type Fleet struct {
	Dir        string
	KeyFile    string // the user's private key
	KnownHosts string // host keys of every host
	User       string
	Hosts      []*Host
	// UsersDir holds the authorized keys of the users AddUser made, one
	// file per user named as the user: every host's sshd reads it too.
	// Unlike Dir, it is readable by every user (sshd reads a user's
	// authorized keys as the user).
	UsersDir string
	fail     func(format string, args ...any)
}

// Host is one sshd.
type Host struct {
	Name    string
	Addr    string // 127.0.0.1:port (or Options.Listen's address)
	Dir     string // a directory of the host's own, for marker files
	LogFile string // sshd's log, when Options.LogLevel is set
	// PublicKey is the host's key (its certificate's key with
	// Options.HostCA).
	PublicKey ssh.PublicKey
	cfgPath   string
	cmd       *exec.Cmd
	mu        sync.Mutex
	fleet     *Fleet
}

// Options for Start.
type Options struct {
	// ExtraConfig lines appended to every sshd_config. sshd keeps the
	// first value of most options, so these cannot change the defaults
	// below; HostConfig can.
	ExtraConfig []string
	// HostConfig lines go first in host i's sshd_config, before the
	// defaults, so they win over them (sshd keeps an option's first value):
	// {1: {"AllowTcpForwarding no"}}.
	HostConfig map[int][]string
	// Listen is the loopback address host i listens on instead of
	// 127.0.0.1, such as 127.0.0.2.
	Listen map[int]string
	// LogLevel, when set, makes every sshd log at that level (VERBOSE,
	// DEBUG1...) to its Host.LogFile instead of being quiet.
	LogLevel string
	// HostCA, when set, signs every host's key into a host certificate
	// (sshd's HostCertificate) for the host's IP address, valid for ever.
	// known_hosts still lists the plain host keys.
	HostCA ssh.Signer
}

// Start starts n sshd hosts named host-0..host-n-1 for a test and stops
// them when it ends.
func Start(t testing.TB, n int, opts Options) *Fleet {
	t.Helper()
	EnsureSSHD(t)
	f, err := launch(t.TempDir(), n, opts, t.Fatalf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// Launch is Start outside a test (benchmarks): sshd must be installed;
// the caller calls Close.
func Launch(dir string, n int, opts Options) (*Fleet, error) {
	if _, err := os.Stat(SSHD); err != nil {
		return nil, fmt.Errorf("sshd not installed: %w", err)
	}
	_ = os.MkdirAll("/run/sshd", 0o755)
	return launch(dir, n, opts, func(format string, args ...any) { panic(fmt.Sprintf(format, args...)) })
}

// Close stops every host.
func (f *Fleet) Close() {
	for _, h := range f.Hosts {
		h.Stop()
	}
	if f.UsersDir != "" {
		_ = os.RemoveAll(f.UsersDir)
	}
}

func launch(dir string, n int, opts Options, fail func(string, ...any)) (*Fleet, error) {
	f := &Fleet{Dir: dir, KeyFile: filepath.Join(dir, "id_ed25519"), KnownHosts: filepath.Join(dir, "known_hosts"), fail: fail}
	f.User = os.Getenv("USER")
	if f.User == "" {
		f.User = "root"
	}
	users, err := os.MkdirTemp("", "sshtest-users-")
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(users, 0o755); err != nil {
		return nil, err
	}
	f.UsersDir = users
	userPub, err := writeKey(f.KeyFile)
	if err != nil {
		return nil, err
	}
	authorized := filepath.Join(dir, "authorized_keys")
	if err := os.WriteFile(authorized, ssh.MarshalAuthorizedKey(userPub), 0o600); err != nil {
		return nil, err
	}
	var known strings.Builder
	taken := map[string]bool{} // addresses given to this fleet's hosts
	for i := 0; i < n; i++ {
		h := &Host{Name: fmt.Sprintf("host-%d", i), Dir: filepath.Join(dir, fmt.Sprintf("host-%d", i)), fleet: f}
		if err := os.MkdirAll(h.Dir, 0o755); err != nil {
			return nil, err
		}
		hostKey := filepath.Join(h.Dir, "ssh_host_ed25519_key")
		hostPub, err := writeKey(hostKey)
		if err != nil {
			return nil, err
		}
		h.PublicKey = hostPub
		ip := "127.0.0.1"
		if a := opts.Listen[i]; a != "" {
			ip = a
		}
		port, err := freePort(ip, taken)
		if err != nil {
			return nil, err
		}
		h.Addr = net.JoinHostPort(ip, strconv.Itoa(port))
		taken[h.Addr] = true
		logLevel := "QUIET"
		if opts.LogLevel != "" {
			logLevel = opts.LogLevel
			h.LogFile = filepath.Join(h.Dir, "sshd.log")
		}
		cfg := append([]string(nil), opts.HostConfig[i]...)
		cfg = append(cfg,
			"Port "+strconv.Itoa(port),
			"ListenAddress "+ip,
			"HostKey "+hostKey,
			"PidFile "+filepath.Join(h.Dir, "sshd.pid"),
			"AuthorizedKeysFile "+authorized+" "+filepath.Join(users, "%u"),
			"StrictModes no",
			"UsePAM no",
			"PasswordAuthentication no",
			"KbdInteractiveAuthentication no",
			"PubkeyAuthentication yes",
			"PermitRootLogin prohibit-password",
			"MaxSessions 10",
			"MaxStartups 200:30:400",
			"PrintMotd no",
			"LogLevel "+logLevel,
			// Debian's bash reads ~/.bashrc for commands sshd runs (root's
			// runs pyenv init, ~90 ms); this keeps the shell's start-up out.
			"SetEnv SHLVL=1",
		)
		if opts.HostCA != nil {
			cert, err := SignHostCert(opts.HostCA, hostPub, ip)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(hostKey+"-cert.pub", ssh.MarshalAuthorizedKey(cert), 0o644); err != nil {
				return nil, err
			}
			cfg = append(cfg, "HostCertificate "+hostKey+"-cert.pub")
		}
		cfg = append(cfg, opts.ExtraConfig...)
		h.cfgPath = filepath.Join(h.Dir, "sshd_config")
		if err := os.WriteFile(h.cfgPath, []byte(strings.Join(cfg, "\n")+"\n"), 0o600); err != nil {
			return nil, err
		}
		known.WriteString(knownhosts.Line([]string{knownhosts.Normalize(h.Addr)}, hostPub) + "\n")
		f.Hosts = append(f.Hosts, h)
	}
	if err := os.WriteFile(f.KnownHosts, []byte(known.String()), 0o600); err != nil {
		return nil, err
	}
	for _, h := range f.Hosts {
		h.Start()
	}
	return f, nil
}

// Start starts (or restarts) the host's sshd and waits until it listens.
func (h *Host) Start() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd != nil {
		return
	}
	args := []string{"-D", "-e", "-f", h.cfgPath}
	if h.LogFile != "" {
		args = append(args, "-E", h.LogFile)
	}
	cmd := exec.Command(SSHD, args...)
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// Its own process group: Stop takes the per-connection sshd processes
	// down with the listener, as a host going down would.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		h.fleet.fail("start sshd %s: %v", h.Name, err)
		return
	}
	h.cmd = cmd
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c, err := net.DialTimeout("tcp", h.Addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	h.fleet.fail("sshd %s not listening on %s after 10s", h.Name, h.Addr)
}

// Stop kills the host's sshd and its connections, as if the host went
// down. Safe to call twice.
func (h *Host) Stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return
	}
	// sshd's per-connection children call setsid, so the process group is
	// not enough: kill every descendant, then the listener.
	for _, pid := range descendants(h.cmd.Process.Pid) {
		_ = syscall.Kill(pid, syscall.SIGKILL)
	}
	_ = syscall.Kill(-h.cmd.Process.Pid, syscall.SIGKILL)
	_ = h.cmd.Wait()
	h.cmd = nil
}

// Freeze stops the host's sshd and everything below it (SIGSTOP), as a
// hung host: TCP is still accepted by the kernel, nothing answers. thaw
// (SIGCONT) undoes it; the test's end does too.
func (h *Host) Freeze() (thaw func()) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.cmd == nil {
		return func() {}
	}
	pids := append([]int{h.cmd.Process.Pid}, descendants(h.cmd.Process.Pid)...)
	for _, pid := range pids {
		_ = syscall.Kill(pid, syscall.SIGSTOP)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGCONT)
			}
		})
	}
}

// descendants lists the processes below pid, from /proc.
func descendants(pid int) []int {
	children := map[int][]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + e.Name() + "/stat")
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so cut after ')'
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		f := strings.Fields(rest)
		if len(f) < 2 {
			continue
		}
		if ppid, err := strconv.Atoi(f[1]); err == nil {
			children[ppid] = append(children[ppid], p)
		}
	}
	var out []int
	queue := []int{pid}
	for len(queue) > 0 {
		p := queue[0]
		queue = queue[1:]
		for _, c := range children[p] {
			out = append(out, c)
			queue = append(queue, c)
		}
	}
	return out
}

func writeKey(path string) (ssh.PublicKey, error) {
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		return nil, err
	}
	block, err := ssh.MarshalPrivateKey(priv, "")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(path, pem.EncodeToMemory(block), 0o600); err != nil {
		return nil, err
	}
	sp, err := ssh.NewPublicKey(pub)
	if err != nil {
		return nil, err
	}
	return sp, os.WriteFile(path+".pub", ssh.MarshalAuthorizedKey(sp), 0o644)
}

// Log is what the host's sshd logged so far (Options.LogLevel).
func (h *Host) Log() string {
	if h.LogFile == "" {
		return ""
	}
	b, _ := os.ReadFile(h.LogFile)
	return string(b)
}

// freePort is a port free on ip that no address in taken has: the kernel
// may hand a port it just gave back out again, and two hosts of one
// fleet on one port would make one sshd answer for both.
func freePort(ip string, taken map[string]bool) (int, error) {
	for range 100 {
		l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
		if err != nil {
			return 0, err
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		if !taken[net.JoinHostPort(ip, strconv.Itoa(port))] {
			return port, nil
		}
	}
	return 0, fmt.Errorf("no free port on %s after 100 tries", ip)
}

// Silent starts a host that accepts TCP connections and never says a
// word, as a stuck sshd or an overloaded VM does, and returns its
// address. It stops with the test.
func Silent(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var held []net.Conn
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = l.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			_ = c.Close()
		}
	})
	return l.Addr().String()
}
