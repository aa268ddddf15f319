package composition

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/gantry-dev/gantry/pkg/dag"
)

// A YAML composition written out as JSON from its tree loads to the same
// composition: what `gantry reconcile` sends after adding targets.
func TestTreeAsJSONLoadsTheSame(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../../examples/*.yaml")
	more, _ := filepath.Glob("../../examples/*/*.yaml")
	files = append(files, more...)
	if len(files) < 2 {
		t.Fatalf("examples: %v", files)
	}
	for _, f := range files {
		if filepath.Base(f) == "inventory.yaml" {
			continue // an inventory, not a composition
		}
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		tree, _, err := Resolve(f, data, filepath.Dir(f))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want, err := dag.Load(tree)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		tree.Set("targets", dag.Strings([]string{want.Formulas[0].ID}))
		js, err := tree.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		back, err := dag.ParseJSON(js)
		if err != nil {
			t.Fatalf("%s: %v\n%s", f, err, js)
		}
		got, err := dag.Load(back)
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		want.Targets = []string{want.Formulas[0].ID}
		a, _ := json.Marshal(want)
		b, _ := json.Marshal(got)
		if string(a) != string(b) {
			t.Fatalf("%s: JSON form loads differently\n%s\n%s", f, a, b)
		}
	}
}

func TestNumberWithoutJSONForm(t *testing.T) {
	t.Parallel()
	tree, err := ParseYAML([]byte("a: .inf\nb: 1.5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tree.MarshalJSON(); err == nil {
		t.Fatal("no error for .inf")
	}
	tree.Set("a", &dag.Value{Kind: dag.KindString, Scalar: "x\"y"})
	js, err := tree.MarshalJSON()
	if err != nil || string(js) != `{"a":"x\"y","b":1.5}` {
		t.Fatalf("%s %v", js, err)
	}
}
