package helmchart

import (
	"slices"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
)

// env returns a container's environment as a map (values only).
func env(c corev1.Container) map[string]string {
	m := map[string]string{}
	for _, e := range c.Env {
		m[e.Name] = e.Value
	}
	return m
}

func container(t *testing.T, d *appsv1.Deployment) corev1.Container {
	t.Helper()
	if n := len(d.Spec.Template.Spec.Containers); n != 1 {
		t.Fatalf("%s: %d containers, want 1", d.Name, n)
	}
	return d.Spec.Template.Spec.Containers[0]
}

func volume(d *appsv1.Deployment, name string) *corev1.Volume {
	for i, v := range d.Spec.Template.Spec.Volumes {
		if v.Name == name {
			return &d.Spec.Template.Spec.Volumes[i]
		}
	}
	return nil
}

func mountPath(c corev1.Container, volume string) string {
	for _, m := range c.VolumeMounts {
		if m.Name == volume {
			return m.MountPath
		}
	}
	return ""
}

// The default values: the four services, each connecting to bus.url as its
// own identity with only its own seed mounted; the SSH workers with the
// key and known_hosts; probes and metrics on the same port.
func TestDefaultValues(t *testing.T) {
	r := render(t, nil)
	services := map[string]string{ // Deployment -> service
		"rel-gantry-planner": "planner", "rel-gantry-state-store": "state-store",
		"rel-gantry-health-gate": "health-gate", "rel-gantry-executor-default": "executor",
	}
	for name, svc := range services {
		t.Run(svc, func(t *testing.T) {
			d := r.deployment(t, name)
			c := container(t, d)
			e := env(c)
			if c.Image != "gantry/"+svc+":0.1.0" {
				t.Errorf("image %q", c.Image)
			}
			if e["NATS_URL"] != "nats://nats:4222" {
				t.Errorf("NATS_URL %q", e["NATS_URL"])
			}
			seed := "/nats/" + svc + ".nk"
			if e["NATS_NKEY"] != seed || e["NATS_CREDS"] != "" {
				t.Errorf("NATS_NKEY %q, NATS_CREDS %q; want the seed %s", e["NATS_NKEY"], e["NATS_CREDS"], seed)
			}
			id := volume(d, "nats-identity")
			if id == nil || id.Secret == nil || id.Secret.SecretName != "gantry-nats-identities" {
				t.Fatalf("identity volume %+v", id)
			}
			if len(id.Secret.Items) != 1 || id.Secret.Items[0].Key != svc+".nk" || mountPath(c, "nats-identity")+"/"+id.Secret.Items[0].Path != seed {
				t.Errorf("identity volume items %+v mounted at %q: want only %s.nk at %s", id.Secret.Items, mountPath(c, "nats-identity"), svc, seed)
			}
			if e["GANTRY_METRICS_ADDR"] != ":9464" || len(c.Ports) != 1 || c.Ports[0].ContainerPort != 9464 || c.Ports[0].Name != "metrics" {
				t.Errorf("metrics: GANTRY_METRICS_ADDR %q, ports %+v", e["GANTRY_METRICS_ADDR"], c.Ports)
			}
			for what, p := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
				if p == nil || p.HTTPGet == nil || p.HTTPGet.Path != "/metrics" || p.HTTPGet.Port.String() != "metrics" {
					t.Errorf("%s probe %+v", what, p)
				}
			}
			if d.Spec.Template.Annotations["prometheus.io/port"] != "9464" || d.Spec.Template.Annotations["prometheus.io/scrape"] != "true" {
				t.Errorf("pod annotations %v", d.Spec.Template.Annotations)
			}
			if c.Resources.Requests.Memory().IsZero() || c.Resources.Limits.Memory().IsZero() {
				t.Errorf("resources %+v", c.Resources)
			}
			if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem || sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
				t.Errorf("security context %+v", sc)
			}
			sshWorker := svc == "executor" || svc == "health-gate"
			ssh := volume(d, "ssh")
			if got := ssh != nil; got != sshWorker {
				t.Fatalf("ssh volume %v, want %v", got, sshWorker)
			}
			if sshWorker {
				if ssh.Secret == nil || ssh.Secret.SecretName != "gantry-ssh" || mountPath(c, "ssh") != "/ssh" {
					t.Errorf("ssh volume %+v at %q", ssh, mountPath(c, "ssh"))
				}
				if e["GANTRY_SSH_KEY"] != "/ssh/id_ed25519" || e["GANTRY_KNOWN_HOSTS"] != "/ssh/known_hosts" {
					t.Errorf("ssh env %v", e)
				}
			}
			if _, ok := e["GANTRY_SECRETS_DIR"]; ok {
				t.Errorf("GANTRY_SECRETS_DIR set without secrets.secretName")
			}
		})
	}
	if d := r.deployment(t, "rel-gantry-executor-default"); *d.Spec.Replicas != 2 || len(container(t, d).Args) != 0 {
		t.Errorf("default pool: %d replicas, args %v; want 2 and no --labels", *d.Spec.Replicas, container(t, d).Args)
	}
	if _, ok := r.objects["ServiceMonitor/rel-gantry"]; ok {
		t.Errorf("a ServiceMonitor by default")
	}
	for k := range r.objects {
		if strings.HasPrefix(k, "StatefulSet/") {
			t.Errorf("%s rendered with nats.enabled false", k)
		}
	}
	svc := r.objects["Service/rel-gantry-metrics"].(*corev1.Service)
	if svc.Spec.ClusterIP != "None" || svc.Spec.Ports[0].Port != 9464 || svc.Spec.Selector["app.kubernetes.io/instance"] != "rel" {
		t.Errorf("metrics service %+v", svc.Spec)
	}
}

// The cluster values: three NATS servers of the subchart with JetStream
// and gantry's accounts, every service replicated and connecting to all
// three, executor pools per zone, a ServiceMonitor.
func TestClusterValues(t *testing.T) {
	r := render(t, valuesFile(t, "values-cluster.yaml"))
	urls := "nats://rel-nats-0.rel-nats-headless.gantry.svc:4222,nats://rel-nats-1.rel-nats-headless.gantry.svc:4222,nats://rel-nats-2.rel-nats-headless.gantry.svc:4222"
	for _, name := range []string{"planner", "state-store", "health-gate", "executor-eu-1", "executor-eu-2", "executor-default"} {
		d := r.deployment(t, "rel-gantry-"+name)
		e := env(container(t, d))
		if e["NATS_URL"] != urls {
			t.Errorf("%s: NATS_URL %q, want the three servers %q", name, e["NATS_URL"], urls)
		}
		if e["GANTRY_REPLICAS"] != "3" {
			t.Errorf("%s: GANTRY_REPLICAS %q, want 3", name, e["GANTRY_REPLICAS"])
		}
		if d.Spec.Template.Spec.Affinity == nil || d.Spec.Template.Spec.Affinity.PodAntiAffinity == nil {
			t.Errorf("%s: no pod anti-affinity", name)
		}
	}
	for pool, want := range map[string][]string{"eu-1": {"--labels", "zone=eu-1"}, "eu-2": {"--labels", "zone=eu-2"}, "default": nil} {
		d := r.deployment(t, "rel-gantry-executor-"+pool)
		if got := container(t, d).Args; !slices.Equal(got, want) {
			t.Errorf("pool %s: args %q, want %q", pool, got, want)
		}
		if d.Spec.Template.Labels["gantry.dev/executor-pool"] != pool {
			t.Errorf("pool %s: labels %v", pool, d.Spec.Template.Labels)
		}
	}
	if n := *r.deployment(t, "rel-gantry-planner").Spec.Replicas; n != 2 {
		t.Errorf("planner replicas %d", n)
	}
	if n := *r.deployment(t, "rel-gantry-executor-default").Spec.Replicas; n != 1 {
		t.Errorf("default pool replicas %d", n)
	}

	sts, ok := r.objects["StatefulSet/rel-nats"].(*appsv1.StatefulSet)
	if !ok {
		t.Fatalf("no NATS StatefulSet: %s", r.names())
	}
	if *sts.Spec.Replicas != 3 {
		t.Errorf("NATS replicas %d", *sts.Spec.Replicas)
	}
	var auth *corev1.Volume
	for i, v := range sts.Spec.Template.Spec.Volumes {
		if v.Name == "gantry-auth" {
			auth = &sts.Spec.Template.Spec.Volumes[i]
		}
	}
	if auth == nil || auth.Secret == nil || auth.Secret.SecretName != "gantry-nats-server" {
		t.Errorf("NATS pods do not mount gantry's server.conf: %+v", auth)
	}
	var natsMount string
	for _, c := range sts.Spec.Template.Spec.Containers {
		if c.Name == "nats" {
			natsMount = mountPath(c, "gantry-auth")
		}
	}
	if natsMount != "/etc/gantry-auth" {
		t.Errorf("nats container mounts gantry-auth at %q", natsMount)
	}
	cm, ok := r.objects["ConfigMap/rel-nats-config"].(*corev1.ConfigMap)
	if !ok {
		t.Fatalf("no NATS ConfigMap: %s", r.names())
	}
	conf := cm.Data["nats.conf"]
	for _, want := range []string{"include ../gantry-auth/server.conf;", `"jetstream"`, `"routes"`} {
		if !strings.Contains(conf, want) {
			t.Errorf("nats.conf lacks %s:\n%s", want, conf)
		}
	}
	sm, ok := r.objects["ServiceMonitor/rel-gantry"].(*monitoringv1.ServiceMonitor)
	if !ok {
		t.Fatalf("no ServiceMonitor: %s", r.names())
	}
	if sm.Spec.Selector.MatchLabels["app.kubernetes.io/component"] != "metrics" || sm.Spec.Endpoints[0].Port != "metrics" {
		t.Errorf("ServiceMonitor %+v", sm.Spec)
	}
}

// The other ways to connect and the executors' secrets.
func TestCredentialsTLSAndSecrets(t *testing.T) {
	r := render(t, map[string]any{
		"bus": map[string]any{
			"credentials": map[string]any{"type": "creds", "secretName": "ids", "create": map[string]any{
				"planner": "P", "executor": "E", "health-gate": "H", "state-store": "S"}},
			"tls": map[string]any{"enabled": true, "secretName": "nats-tls"},
		},
		"ssh":     map[string]any{"cert": "id_ed25519-cert.pub"},
		"secrets": map[string]any{"secretName": "fleet-secrets"},
	})
	d := r.deployment(t, "rel-gantry-executor-default")
	c := container(t, d)
	e := env(c)
	want := map[string]string{
		"NATS_CREDS": "/nats/executor.creds", "NATS_CA": "/nats-tls/ca.crt", "NATS_CERT": "/nats-tls/tls.crt", "NATS_KEY": "/nats-tls/tls.key",
		"GANTRY_SSH_CERT": "/ssh/id_ed25519-cert.pub", "GANTRY_SECRETS_DIR": "/secrets",
	}
	for k, v := range want {
		if e[k] != v {
			t.Errorf("%s = %q, want %q", k, e[k], v)
		}
	}
	if _, ok := e["NATS_NKEY"]; ok {
		t.Errorf("NATS_NKEY set with creds")
	}
	if v := volume(d, "secrets"); v == nil || v.Secret.SecretName != "fleet-secrets" || mountPath(c, "secrets") != "/secrets" {
		t.Errorf("secrets volume %+v at %q", v, mountPath(c, "secrets"))
	}
	if v := volume(d, "nats-tls"); v == nil || v.Secret.SecretName != "nats-tls" || mountPath(c, "nats-tls") != "/nats-tls" {
		t.Errorf("tls volume %+v", v)
	}
	if v := volume(d, "nats-identity"); v == nil || v.Secret.SecretName != "ids" || v.Secret.Items[0].Key != "executor.creds" {
		t.Errorf("identity volume %+v", v)
	}
	planner := env(container(t, r.deployment(t, "rel-gantry-planner")))
	if _, ok := planner["GANTRY_SECRETS_DIR"]; ok {
		t.Errorf("the planner got the secrets dir")
	}
	s, ok := r.objects["Secret/ids"].(*corev1.Secret)
	if !ok {
		t.Fatalf("no Secret ids: %s", r.names())
	}
	if len(s.StringData) != 4 || s.StringData["health-gate.creds"] != "H" {
		t.Errorf("secret data %v", s.StringData)
	}
}

// Values the chart refuses, each with an error naming the problem.
func TestRefusedValues(t *testing.T) {
	pools := func(p ...map[string]any) map[string]any {
		l := make([]any, len(p))
		for i := range p {
			l[i] = p[i]
		}
		return map[string]any{"executor": map[string]any{"pools": l}}
	}
	cases := []struct {
		name string
		vals map[string]any
		want string
	}{
		{"label other than zone", pools(map[string]any{"name": "a", "labels": map[string]any{"region": "x"}}), "additional properties 'region' not allowed"},
		{"zone not a name", pools(map[string]any{"name": "a", "labels": map[string]any{"zone": "EU 1"}}), "does not match pattern"},
		{"pool twice", pools(map[string]any{"name": "a"}, map[string]any{"name": "a"}), `pool "a" is listed twice`},
		{"pool name not a DNS label", pools(map[string]any{"name": "Pool_A"}), "does not match pattern"},
		{"unknown credentials type", map[string]any{"bus": map[string]any{"credentials": map[string]any{"type": "password"}}}, "credentials/type"},
		{"created secret missing an identity", map[string]any{"bus": map[string]any{"credentials": map[string]any{"type": "nkey", "create": map[string]any{"planner": "P"}}}}, "bus.credentials.create.executor"},
		{"no NATS", map[string]any{"bus": map[string]any{"url": ""}}, "bus.url is required"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := template(tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want one containing %q", err, tc.want)
			}
		})
	}
}
