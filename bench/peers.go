package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/hostexec/sshtest"
	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// rawTarget is a raw loop to run: hosts dialed, each its own connection,
// commands run one after another on it, parallel hosts at a time.
type rawTarget struct {
	keyFile, knownHosts, user string
	addrs                     []string // host:port
	parallel                  int      // hosts at a time
	perHost                   int      // commands run on each host's connection
	command                   string
}

// ssh500Floor is ssh-500's floor: a minimal Go loop over x/crypto/ssh,
// one connection per host, 100 sequential `true` per host, hosts in
// parallel: the cost of sshd.
func ssh500Floor(f *sshtest.Fleet) rawTarget {
	t := rawTarget{keyFile: f.KeyFile, knownHosts: f.KnownHosts, user: f.User, parallel: len(f.Hosts), perHost: 100, command: "true"}
	for _, h := range f.Hosts {
		t.addrs = append(t.addrs, h.Addr)
	}
	return t
}

// rawLoop runs t over x/crypto/ssh and returns its wall time, from the
// first dial to the last connection closed.
func rawLoop(t rawTarget) (time.Duration, error) {
	cfg, err := rawConfig(t)
	if err != nil {
		return 0, err
	}
	start := time.Now()
	errs := make(chan error, len(t.addrs))
	todo := make(chan string, len(t.addrs))
	for _, a := range t.addrs {
		todo <- a
	}
	close(todo)
	var wg sync.WaitGroup
	for range max(t.parallel, 1) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for addr := range todo {
				if err := rawHost(cfg, addr, t.perHost, t.command); err != nil {
					errs <- fmt.Errorf("%s: %w", addr, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	return time.Since(start), nil
}

// rawConfig is t's client configuration: its key, its known_hosts.
func rawConfig(t rawTarget) (*ssh.ClientConfig, error) {
	pem, err := os.ReadFile(t.keyFile)
	if err != nil {
		return nil, err
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return nil, err
	}
	hk, err := knownhosts.New(t.knownHosts)
	if err != nil {
		return nil, err
	}
	return &ssh.ClientConfig{User: t.user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hk, Timeout: 10 * time.Second}, nil
}

// rawHost dials one host and runs command n times, a session each.
func rawHost(cfg *ssh.ClientConfig, addr string, n int, command string) error {
	c, err := ssh.Dial("tcp", addr, cfg)
	if err != nil {
		return err
	}
	defer c.Close()
	for i := 0; i < n; i++ {
		s, err := c.NewSession()
		if err != nil {
			return err
		}
		err = s.Run(command)
		s.Close()
		if err != nil {
			return err
		}
	}
	return nil
}

// openssh: the ssh client with ControlMaster multiplexing, 100 sequential
// `true` per host, hosts in parallel (the master connection is made in the
// timed run, as gantry's connections are).
func openssh(f *sshtest.Fleet, dir string) (time.Duration, error) {
	start := time.Now()
	errs := make(chan error, len(f.Hosts))
	var wg sync.WaitGroup
	for i, h := range f.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			host, port := strings.Split(h.Addr, ":")[0], strings.Split(h.Addr, ":")[1]
			ctl := filepath.Join(dir, fmt.Sprintf("cm-%d-%d", i, time.Now().UnixNano()))
			base := []string{"-i", f.KeyFile, "-p", port, "-o", "UserKnownHostsFile=" + f.KnownHosts, "-o", "StrictHostKeyChecking=yes",
				"-o", "BatchMode=yes", "-o", "ControlMaster=auto", "-o", "ControlPath=" + ctl, "-o", "ControlPersist=60", f.User + "@" + host}
			for j := 0; j < 100; j++ {
				if out, err := exec.Command("ssh", append(base, "true")...).CombinedOutput(); err != nil {
					errs <- fmt.Errorf("ssh %s: %v: %s", h.Addr, err, out)
					return
				}
			}
			_ = exec.Command("ssh", append([]string{"-O", "exit"}, base...)...).Run()
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		return 0, err
	}
	return time.Since(start), nil
}

// ansible: a playbook of 100 `command: true` tasks on the 5 hosts,
// forks 5, pipelining on.
func ansible(f *sshtest.Fleet, dir string) (time.Duration, error) {
	if _, err := exec.LookPath("ansible-playbook"); err != nil {
		return 0, fmt.Errorf("ansible-playbook not installed (apt-get install ansible-core): %w", err)
	}
	var inv strings.Builder
	inv.WriteString("[fleet]\n")
	for i, h := range f.Hosts {
		host, port := strings.Split(h.Addr, ":")[0], strings.Split(h.Addr, ":")[1]
		fmt.Fprintf(&inv, "h%d ansible_host=%s ansible_port=%s ansible_user=%s\n", i, host, port, f.User)
	}
	var pb strings.Builder
	pb.WriteString("- hosts: fleet\n  gather_facts: false\n  tasks:\n")
	for i := 0; i < 100; i++ {
		fmt.Fprintf(&pb, "    - name: t%d\n      command: \"true\"\n      changed_when: false\n", i)
	}
	cfg := fmt.Sprintf("[defaults]\nforks = 5\nhost_key_checking = True\ninterpreter_python = /usr/bin/python3\nprivate_key_file = %s\n[ssh_connection]\npipelining = True\nssh_args = -o UserKnownHostsFile=%s -o ControlMaster=auto -o ControlPersist=60s\ncontrol_path_dir = %s\n", f.KeyFile, f.KnownHosts, dir)
	for name, body := range map[string]string{"inventory": inv.String(), "playbook.yml": pb.String(), "ansible.cfg": cfg} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			return 0, err
		}
	}
	cmd := exec.Command("ansible-playbook", "-i", "inventory", "playbook.yml")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "ANSIBLE_CONFIG="+filepath.Join(dir, "ansible.cfg"), "ANSIBLE_NOCOLOR=1")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("ansible-playbook: %v\n%s", err, tailStr(string(out), 2000))
	}
	return time.Since(start), nil
}

func tailStr(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
