package events_test

import (
	"bytes"
	"encoding/json"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/events"
)

// The permissions are part of the contract: a change shows here.
func TestPermissionsGolden(t *testing.T) {
	m := map[events.Identity]events.Permissions{}
	for _, id := range append(slices.Clone(events.Services), events.People...) {
		m[id] = events.PermissionsFor(id)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		t.Fatal(err)
	}
	golden(t, "permissions", b.Bytes())
}

// Every part of the topology is used by some service, so it has its
// permission; and nobody but the services may write events or work.
func TestTopologyHasPermissions(t *testing.T) {
	var published, streams, buckets []string
	var durables []events.Durable
	for _, id := range events.Services {
		u := events.Uses(id)
		published = append(published, u.Publish...)
		streams = append(streams, u.Streams...)
		durables = append(durables, u.Consumes...)
		buckets = append(buckets, u.Write...)
	}
	for _, name := range events.StreamNames {
		if !slices.Contains(streams, name) {
			t.Errorf("stream %s: no service creates it", name)
		}
		for _, s := range events.StreamSubjects(name) {
			if !slices.Contains(published, s) {
				t.Errorf("stream %s subject %s: no service may publish it", name, s)
			}
		}
		for _, d := range events.Durables(name) {
			if !slices.Contains(durables, events.Durable{Stream: name, Name: d}) {
				t.Errorf("consumer %s on %s: no service consumes it", d, name)
			}
		}
	}
	for _, b := range events.BucketNames {
		if !slices.Contains(buckets, b) {
			t.Errorf("bucket %s: no service writes it", b)
		}
	}
	for _, id := range events.Services {
		for _, s := range events.Uses(id).Serve {
			if !slices.ContainsFunc(events.ClientImports(), func(im events.Import) bool { return im.Subject == s && im.Service && im.Share }) {
				t.Errorf("%s serves %s, which people cannot reach with their identity attached", id, s)
			}
		}
	}
	for _, id := range events.People {
		p := events.PermissionsFor(id)
		for _, s := range p.PublishAllow {
			if strings.HasPrefix(s, "decky.") || strings.HasPrefix(s, "$KV.") || strings.HasSuffix(s, ".lifecycle") {
				t.Errorf("%s may publish %s", id, s)
			}
		}
		for _, want := range []string{"decky.>", events.AllWorkflowLifecycle, "$KV.>", "$JS.API.STREAM.DELETE.>", "$JS.API.STREAM.PURGE.>", "$JS.API.CONSUMER.DELETE.>"} {
			if !slices.Contains(p.PublishDeny, want) {
				t.Errorf("%s: %s is not denied", id, want)
			}
		}
	}
}

func TestPrincipalFrom(t *testing.T) {
	for _, tc := range []struct {
		header string
		want   events.Principal
	}{
		{"", events.Principal{}},
		{"not json", events.Principal{}},
		{`{"user":"UX"}`, events.Principal{}},
		{`{"acc":"GANTRY_CLIENTS","user":"UX","name_tag":"alice"}`, events.Principal{Account: "GANTRY_CLIENTS", User: "UX", Name: "alice", Attested: true}},
	} {
		if got := events.PrincipalFrom(tc.header); got != tc.want {
			t.Errorf("PrincipalFrom(%q) = %+v, want %+v", tc.header, got, tc.want)
		}
	}
	if s := (events.Principal{}).String(); s != "unattested" {
		t.Errorf("String of nobody = %q", s)
	}
}

// Only operators may prune; each service may remove only what it writes.
func TestPrunePermissions(t *testing.T) {
	has := func(id events.Identity, s string) bool {
		return slices.Contains(events.PermissionsFor(id).PublishAllow, s)
	}
	for _, id := range append(slices.Clone(events.Services), events.People...) {
		if has(id, events.SubjectPrune) != (id == events.Operator) {
			t.Errorf("%s may publish %s: %v", id, events.SubjectPrune, has(id, events.SubjectPrune))
		}
	}
	owner := map[string]events.Identity{
		"$JS.API.STREAM.PURGE.KV_gantry_workflows": events.Planner,
		"$JS.API.STREAM.PURGE.KV_gantry_runs":      events.Planner,
		"$JS.API.STREAM.MSG.DELETE.GANTRY_EVENTS":  events.Planner,
		"$JS.API.STREAM.PURGE.KV_gantry_nodes":     events.Executor,
		"$JS.API.STREAM.MSG.DELETE.GANTRY_LOGS":    events.Executor,
		"$JS.API.STREAM.PURGE.KV_gantry_state":     events.StateStore,
		"$JS.API.STREAM.PURGE.KV_gantry_slots":     "",
		"$JS.API.STREAM.PURGE.GANTRY_EVENTS":       "",
	}
	for s, who := range owner {
		for _, id := range append(slices.Clone(events.Services), events.People...) {
			if has(id, s) != (id == who) {
				t.Errorf("%s may publish %s: %v", id, s, has(id, s))
			}
		}
	}
}

func TestParsePruneRequest(t *testing.T) {
	for body, want := range map[string]string{
		`{"keep":2}`:                      "",
		`{"older_than":"30d"}`:            "",
		`{"older_than":"36h","keep":0}`:   "",
		`{}`:                              "say which runs go",
		`{"keep":-1}`:                     "negative",
		`{"older_than":"soon"}`:           "not a duration",
		`{"older_than":"0d"}`:             "not a positive duration",
		`{"older_than":"1d","dry_run":1}`: "not JSON",
	} {
		_, _, err := events.ParsePruneRequest([]byte(body))
		if (want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), want)) {
			t.Errorf("%s: %v, want %q", body, err, want)
		}
	}
}
