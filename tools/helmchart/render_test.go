package helmchart

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/action"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"sigs.k8s.io/yaml"
)

// chartDir is the chart, from this package's directory.
var chartDir = filepath.Join("..", "..", "deploy", "helm", "gantry")

const (
	releaseName = "rel"
	namespace   = "gantry"
)

// kinds maps each apiVersion and kind the chart (and the NATS subchart
// with the cluster values) renders to the Go type it must decode into. A
// kind missing here fails the test: add its type.
var kinds = map[string]func() any{
	"apps/v1/Deployment":            func() any { return &appsv1.Deployment{} },
	"apps/v1/StatefulSet":           func() any { return &appsv1.StatefulSet{} },
	"v1/Service":                    func() any { return &corev1.Service{} },
	"v1/Secret":                     func() any { return &corev1.Secret{} },
	"v1/ConfigMap":                  func() any { return &corev1.ConfigMap{} },
	"v1/Pod":                        func() any { return &corev1.Pod{} },
	"v1/ServiceAccount":             func() any { return &corev1.ServiceAccount{} },
	"policy/v1/PodDisruptionBudget": func() any { return &policyv1.PodDisruptionBudget{} },
	"monitoring.coreos.com/v1/ServiceMonitor": func() any { return &monitoringv1.ServiceMonitor{} },
	"monitoring.coreos.com/v1/PodMonitor":     func() any { return &monitoringv1.PodMonitor{} },
}

// rendered is a chart's output: every object, decoded, by kind and name.
type rendered struct {
	objects map[string]any // "Kind/name" -> *T
}

func (r rendered) deployment(t *testing.T, name string) *appsv1.Deployment {
	t.Helper()
	d, ok := r.objects["Deployment/"+name].(*appsv1.Deployment)
	if !ok {
		t.Fatalf("no Deployment %q; rendered: %s", name, r.names())
	}
	return d
}

func (r rendered) names() string {
	var out []string
	for k := range r.objects {
		out = append(out, k)
	}
	sort.Strings(out)
	return strings.Join(out, ", ")
}

// valuesFile reads one of the chart's values files.
func valuesFile(t *testing.T, name string) map[string]any {
	t.Helper()
	vals, err := chartutil.ReadValuesFile(filepath.Join(chartDir, name))
	if err != nil {
		t.Fatal(err)
	}
	return vals
}

// render renders the chart with vals as `helm template` does (values
// schema included), hooks too, and decodes every object strictly.
func render(t *testing.T, vals map[string]any) rendered {
	t.Helper()
	manifest, err := template(vals)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return decodeAll(t, manifest)
}

func template(vals map[string]any) (string, error) {
	chrt, err := loader.Load(chartDir)
	if err != nil {
		return "", err
	}
	install := action.NewInstall(&action.Configuration{Log: func(string, ...any) {}})
	install.DryRun, install.ClientOnly, install.Replace = true, true, true
	install.ReleaseName, install.Namespace = releaseName, namespace
	rel, err := install.Run(chrt, vals)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	b.WriteString(rel.Manifest)
	for _, h := range rel.Hooks {
		fmt.Fprintf(&b, "\n---\n# Source: %s\n%s", h.Path, h.Manifest)
	}
	return b.String(), nil
}

func decodeAll(t *testing.T, manifest string) rendered {
	t.Helper()
	r := rendered{objects: map[string]any{}}
	for _, doc := range releaseutil.SplitManifests(manifest) {
		var head struct {
			APIVersion string `json:"apiVersion"`
			Kind       string `json:"kind"`
			Metadata   struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
			t.Fatalf("not YAML: %v\n%s", err, doc)
		}
		newObj, ok := kinds[head.APIVersion+"/"+head.Kind]
		if !ok {
			t.Fatalf("%s %s %q: no Go type to check it against; add it to kinds\n%s", head.APIVersion, head.Kind, head.Metadata.Name, doc)
		}
		obj := newObj()
		if err := yaml.UnmarshalStrict([]byte(doc), obj); err != nil {
			t.Errorf("%s %q does not decode strictly into %T: %v\n%s", head.Kind, head.Metadata.Name, obj, err, doc)
			continue
		}
		key := head.Kind + "/" + head.Metadata.Name
		if _, dup := r.objects[key]; dup {
			t.Errorf("%s rendered twice", key)
		}
		r.objects[key] = obj
	}
	return r
}

// lintChart runs Helm's linter with vals (as `helm lint -f`) and fails
// on every message of error severity.
func lintChart(t *testing.T, vals map[string]any) {
	t.Helper()
	l := lint.All(chartDir, vals, namespace, false)
	for _, m := range l.Messages {
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// TestStrictDecoderCatchesUnknownFields: the strict decoding this file
// relies on refuses a field a type does not have.
func TestStrictDecoderCatchesUnknownFields(t *testing.T) {
	doc := "apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replicas: 1\n  replica: 2\n"
	if err := yaml.UnmarshalStrict([]byte(doc), &appsv1.Deployment{}); err == nil || !strings.Contains(err.Error(), `unknown field "replica"`) {
		t.Fatalf("strict decoding accepted an unknown field: %v", err)
	}
}

func TestLint(t *testing.T) {
	for _, f := range []string{"", "values-cluster.yaml"} {
		t.Run("values="+f, func(t *testing.T) {
			vals := map[string]any{}
			if f != "" {
				vals = valuesFile(t, f)
			}
			lintChart(t, vals)
		})
	}
}
