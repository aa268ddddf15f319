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

// floor: a minimal Go loop over x/crypto/ssh, one connection per host,
// 100 sequential `true` per host, hosts in parallel: the cost of sshd.
func floor(f *sshtest.Fleet) (time.Duration, error) {
	pem, err := os.ReadFile(f.KeyFile)
	if err != nil {
		return 0, err
	}
	signer, err := ssh.ParsePrivateKey(pem)
	if err != nil {
		return 0, err
	}
	hk, err := knownhosts.New(f.KnownHosts)
	if err != nil {
		return 0, err
	}
	cfg := &ssh.ClientConfig{User: f.User, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, HostKeyCallback: hk, Timeout: 10 * time.Second}
	start := time.Now()
	errs := make(chan error, len(f.Hosts))
	var wg sync.WaitGroup
	for _, h := range f.Hosts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := ssh.Dial("tcp", h.Addr, cfg)
			if err != nil {
				errs <- err
				return
			}
			defer c.Close()
			for i := 0; i < 100; i++ {
				s, err := c.NewSession()
				if err != nil {
					errs <- err
					return
				}
				err = s.Run("true")
				s.Close()
				if err != nil {
					errs <- err
					return
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
