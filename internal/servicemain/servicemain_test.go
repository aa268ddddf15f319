package servicemain

import (
	"bytes"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"regexp"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
	"github.com/gantry-dev/gantry/pkg/hostexec/transport"
	executor "github.com/gantry-dev/gantry/services/executor/service"
	healthgate "github.com/gantry-dev/gantry/services/health-gate/service"
	planner "github.com/gantry-dev/gantry/services/planner/service"
	statestore "github.com/gantry-dev/gantry/services/state-store/service"
)

// services are the four services as their main.go declare them.
func services() []Service {
	return []Service{
		{Name: "planner", Identity: events.Planner, Config: &planner.Config{}, Spans: true},
		{Name: "executor", Identity: events.Executor, Config: &executor.Config{}, Spans: true},
		{Name: "health-gate", Identity: events.HealthGate, Config: &healthgate.Config{}, Spans: true},
		{Name: "state-store", Identity: events.StateStore, Config: &statestore.Config{}},
	}
}

func noEnv(string) (string, bool) { return "", false }

// helpBlocks is each flag's block of a service's --help, by name.
func helpBlocks(t *testing.T, help string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, m := range regexp.MustCompile(`(?m)^  --([a-z0-9-]+)[^\n]*\n((?:        [^\n]*\n)+)`).FindAllStringSubmatch(help, -1) {
		out[m[1]] = m[2]
	}
	return out
}

// Every service's --help lists each of its flags with its environment
// variable, and the variables the compose files, Helm chart and systemd
// env files set keep their names.
func TestHelpNamesEachFlagsVariable(t *testing.T) {
	want := map[string]map[string]string{
		"": {"server": "NATS_URL", "creds": "NATS_CREDS", "nkey": "NATS_NKEY", "tls-ca": "NATS_CA", "tls-cert": "NATS_CERT",
			"tls-key": "NATS_KEY", "context": "NATS_CONTEXT", "replicas": "GANTRY_REPLICAS", "metrics": "GANTRY_METRICS_ADDR",
			"pprof": "GANTRY_PPROF", "nats-ping-interval": "GANTRY_NATS_PING_INTERVAL", "nats-spread": "GANTRY_NATS_SPREAD"},
		"planner": {"cancel-wait": "GANTRY_CANCEL_WAIT", "unclaimed-after": "GANTRY_UNCLAIMED_AFTER", "identity-names": "GANTRY_IDENTITY_NAMES",
			"retention-age": "GANTRY_RETENTION_AGE", "retention-keep": "GANTRY_RETENTION_KEEP"},
		"executor": {"labels": "GANTRY_EXECUTOR_LABELS", "max-formulas": "GANTRY_MAX_FORMULAS", "per-host": "GANTRY_PER_HOST",
			"ssh-key": "GANTRY_SSH_KEY", "ssh-cert": "GANTRY_SSH_CERT", "known-hosts": "GANTRY_KNOWN_HOSTS", "ssh-user": "USER",
			"allow-local": "GANTRY_ALLOW_LOCAL", "secrets-dir": "GANTRY_SECRETS_DIR", "files-dir": "GANTRY_FILES_DIR"},
		"health-gate": {"concurrency": "GANTRY_CONCURRENCY", "ssh-key": "GANTRY_SSH_KEY", "known-hosts": "GANTRY_KNOWN_HOSTS",
			"allow-local": "GANTRY_ALLOW_LOCAL", "secrets-dir": "GANTRY_SECRETS_DIR", "ssh-user": "USER"},
		"state-store": {},
	}
	for _, s := range services() {
		t.Run(s.Name, func(t *testing.T) {
			var out bytes.Buffer
			if code := Run(s, []string{"--help"}, noEnv, &out); code != 0 {
				t.Fatalf("--help: exit %d\n%s", code, out.String())
			}
			blocks := helpBlocks(t, out.String())
			fs := flag.NewFlagSet(s.Name, flag.ContinueOnError)
			new(Common).RegisterFlags(fs)
			s.Config.RegisterFlags(fs)
			env := EnvOf(s.Config)
			n := 0
			fs.VisitAll(func(f *flag.Flag) {
				n++
				b, ok := blocks[f.Name]
				if !ok {
					t.Errorf("--help does not list --%s", f.Name)
					return
				}
				if v := env.Name(f.Name); !strings.Contains(b, "$"+v+")") && !strings.Contains(b, "$"+v+";") && !strings.Contains(b, "$"+v+",") && !strings.Contains(b, "$"+v+":") {
					t.Errorf("--%s's help does not name $%s: %q", f.Name, v, b)
				}
			})
			if len(blocks) != n {
				t.Errorf("--help lists %d flags, the service takes %d", len(blocks), n)
			}
			for _, m := range []map[string]string{want[""], want[s.Name]} {
				for flagName, v := range m {
					if env.Name(flagName) != v || !strings.Contains(blocks[flagName], "$"+v) {
						t.Errorf("--%s: variable %s, want %s named in %q", flagName, env.Name(flagName), v, blocks[flagName])
					}
				}
			}
		})
	}
}

// An environment variable sets its flag; the flag on the command line
// wins over it; a variable that is no valid value is an error naming it
// and its flag.
func TestEnvSetsAFlagAndTheFlagWins(t *testing.T) {
	env := map[string]string{"GANTRY_MAX_FORMULAS": "12", "GANTRY_EXECUTOR_LABELS": "zone=eu-1", "GANTRY_SSH_KEY": "/env/key",
		"USER": "deploy", "GANTRY_ALLOW_LOCAL": "true", "GANTRY_PPROF": "127.0.0.1:6061", "NATS_URL": "nats://env:4222",
		"GANTRY_NATS_PING_INTERVAL": "2s"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var cfg executor.Config
	var c Common
	s := Service{Name: "executor", Config: &cfg}
	if err := parse(s, &c, nil, lookup, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxFormulas != 12 || cfg.Labels["zone"] != "eu-1" || cfg.Hosts.SSH.KeyFile != "/env/key" || cfg.Hosts.SSH.DefaultUser != "deploy" ||
		!cfg.Hosts.AllowLocal || c.PProf != "127.0.0.1:6061" || c.NATS.URL != "nats://env:4222" || c.NATS.PingInterval.String() != "2s" {
		t.Errorf("from the environment: %+v, %+v", cfg, c)
	}
	cfg, c = executor.Config{}, Common{}
	args := []string{"--max-formulas", "3", "--labels", "zone=us-2", "--allow-local=false", "--pprof", "127.0.0.1:7000", "--server", "nats://flag:4222"}
	if err := parse(s, &c, args, lookup, io.Discard); err != nil {
		t.Fatal(err)
	}
	if cfg.MaxFormulas != 3 || cfg.Labels["zone"] != "us-2" || cfg.Hosts.AllowLocal || c.PProf != "127.0.0.1:7000" || c.NATS.URL != "nats://flag:4222" ||
		cfg.Hosts.SSH.KeyFile != "/env/key" {
		t.Errorf("flags given win, the rest from the environment: %+v, %+v", cfg, c)
	}
	env["GANTRY_MAX_FORMULAS"] = "many"
	err := parse(s, &Common{}, nil, lookup, io.Discard)
	if err == nil || !strings.Contains(err.Error(), "$GANTRY_MAX_FORMULAS") || !strings.Contains(err.Error(), "--max-formulas") {
		t.Errorf("a bad variable: %v, want an error naming it and the flag", err)
	}
	env["GANTRY_MAX_FORMULAS"] = "0"
	if err := parse(s, &Common{}, nil, lookup, io.Discard); err == nil || !strings.Contains(err.Error(), "--max-formulas 0") {
		t.Errorf("a value the service refuses: %v", err)
	}
}

// What the executor and health-gate take from the worker's environment
// beside their flags (the ssh-agent's socket; the PATH, HOME, LANG and
// USER a local command keeps) reaches their settings through the lookup
// the main is given, not through the process's own environment.
func TestWorkersEnvironmentReachesTheSettings(t *testing.T) {
	env := map[string]string{"SSH_AUTH_SOCK": "/run/agent.sock", "PATH": "/opt/bin", "HOME": "/home/deploy", "LANG": "C.UTF-8", "USER": "deploy"}
	lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
	var x executor.Config
	var h healthgate.Config
	for _, s := range []Service{{Name: "executor", Config: &x}, {Name: "health-gate", Config: &h}} {
		if err := parse(s, &Common{}, nil, lookup, io.Discard); err != nil {
			t.Fatal(err)
		}
	}
	for name, hosts := range map[string]transport.HostsConfig{"executor": x.Hosts, "health-gate": h.Hosts} {
		w := hosts.Worker
		if hosts.SSH.AgentSocket != "/run/agent.sock" || hosts.SSH.Home != "/home/deploy" || w.Path != "/opt/bin" || w.Home != "/home/deploy" || w.Lang != "C.UTF-8" || w.User != "deploy" {
			t.Errorf("%s: agent socket %q, worker env %+v: want the lookup's", name, hosts.SSH.AgentSocket, w)
		}
	}
}

// A bad flag or setting ends the service with exit 2 and a JSON log line
// naming the problem, before it connects anywhere.
func TestBadFlagExit2(t *testing.T) {
	for _, args := range [][]string{{"--cancel-wait", "0s"}, {"--no-such-flag"}} {
		var out bytes.Buffer
		s := services()[0]
		if code := Run(s, args, noEnv, &out); code != 2 || !strings.Contains(out.String(), `"msg":"bad flag"`) {
			t.Errorf("%q: exit %d\n%s", args, code, out.String())
		}
	}
}

// --pprof serves Go's profiles under /debug/pprof/ and nothing else.
func TestPProfHandler(t *testing.T) {
	srv := httptest.NewServer(PProfHandler())
	defer srv.Close()
	for path, want := range map[string]int{"/debug/pprof/": 200, "/debug/pprof/goroutine?debug=1": 200, "/metrics": 404, "/": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("GET %s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
