package composition_test

import (
	"bytes"
	"os"
	"testing"

	"github.com/gantry-dev/gantry/pkg/composition"
	"github.com/santhosh-tekuri/jsonschema/v6"
)

// docs/inventory.schema.json and the inventory reader agree on the
// `ansible-inventory --list` JSON format: what one accepts, the other
// does, and each document with a wrong shape is refused by both.
func TestInventorySchema(t *testing.T) {
	schema, err := jsonschema.NewCompiler().Compile("../../docs/inventory.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	validate := func(doc []byte) error {
		v, err := jsonschema.UnmarshalJSON(bytes.NewReader(doc))
		if err != nil {
			return err
		}
		return schema.Validate(v)
	}
	listed, err := os.ReadFile("testdata/ansible/ansible-for-devops-dynamic-json/inventory.json")
	if err != nil {
		t.Fatal(err)
	}
	valid := map[string]string{
		"ansible-for-devops": string(listed),
		"ansible-inventory --list": `{"_meta":{"hostvars":{"web-1":{"ansible_host":"10.0.0.11","ports":[80,443]},"db-1":{}}},
			"all":{"children":["ungrouped","web","db"]},"ungrouped":{},"web":{"hosts":["web-1"],"vars":{"tier":"front","weight":2}},
			"db":{"hosts":["db-1"]}}`,
		"a group as a list of hosts": `{"web":["web-1","web-2"]}`,
		"children as a mapping":      `{"all":{"children":{"web":{},"db":{}}},"web":{"hosts":["w"]},"db":{"hosts":["d"]}}`,
		"null hostvars and vars":     `{"_meta":{"hostvars":null},"web":{"hosts":["w"],"vars":null}}`,
		"a group that is one host":   `{"_meta":{},"bastion":{"ansible_host":"203.0.113.5"}}`,
	}
	for name, doc := range valid {
		t.Run("valid/"+name, func(t *testing.T) {
			if _, err := composition.ReadInventory("inventory.json", []byte(doc)); err != nil {
				t.Fatalf("the reader refuses it: %v", err)
			}
			if err := validate([]byte(doc)); err != nil {
				t.Errorf("the schema refuses it: %v", err)
			}
		})
	}
	invalid := map[string]string{
		"hosts not a list":       `{"_meta":{},"web":{"hosts":"web-1"}}`,
		"an empty host name":     `{"_meta":{},"web":{"hosts":[""]}}`,
		"a host name not a text": `{"_meta":{},"web":{"hosts":[5]}}`,
		"vars a list":            `{"_meta":{},"web":{"hosts":["w"],"vars":["a"]}}`,
		"children a text":        `{"_meta":{},"all":{"children":"web"}}`,
		"hostvars a list":        `{"_meta":{"hostvars":["w"]},"web":["w"]}`,
		"a host's vars a list":   `{"_meta":{"hostvars":{"w":[1]}},"web":["w"]}`,
		"a group a number":       `{"_meta":{},"web":5}`,
	}
	for name, doc := range invalid {
		t.Run("invalid/"+name, func(t *testing.T) {
			if _, err := composition.ReadInventory("inventory.json", []byte(doc)); err == nil {
				t.Errorf("the reader accepts it")
			}
			if err := validate([]byte(doc)); err == nil {
				t.Errorf("the schema accepts it")
			}
		})
	}
}
