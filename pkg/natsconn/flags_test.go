package natsconn

import (
	"bytes"
	"flag"
	"io"
	"strings"
	"testing"
)

func newFlags() (*flag.FlagSet, *int, *string, *string) {
	fs := flag.NewFlagSet("svc", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	n := fs.Int("max-formulas", 64, "formulas running at once")
	labels := fs.String("labels", "", "zone=ZONE ($GANTRY_EXECUTOR_LABELS; default none)")
	server := fs.String("server", "", "NATS URL ($NATS_URL, else the context's)")
	return fs, n, labels, server
}

func TestParseServiceEnv(t *testing.T) {
	env := map[string]string{"labels": "GANTRY_EXECUTOR_LABELS"}
	t.Setenv("GANTRY_MAX_FORMULAS", "12")
	t.Setenv("GANTRY_EXECUTOR_LABELS", "zone=eu-1")
	t.Setenv("NATS_URL", "nats://elsewhere:4222")
	fs, n, labels, server := newFlags()
	if err := ParseService(fs, nil, "svc", "does things", env); err != nil {
		t.Fatal(err)
	}
	if *n != 12 || *labels != "zone=eu-1" || *server != "" {
		t.Fatalf("from the environment: max-formulas %d, labels %q, server %q (NATS_URL is Resolved's)", *n, *labels, *server)
	}
	fs, n, _, _ = newFlags()
	if err := ParseService(fs, []string{"--max-formulas", "3"}, "svc", "", env); err != nil || *n != 3 {
		t.Fatalf("a flag given wins: %d, %v", *n, err)
	}
}

func TestParseServiceBadEnv(t *testing.T) {
	t.Setenv("GANTRY_MAX_FORMULAS", "many")
	fs, _, _, _ := newFlags()
	err := ParseService(fs, nil, "svc", "", nil)
	if err == nil || !strings.Contains(err.Error(), "$GANTRY_MAX_FORMULAS") || !strings.Contains(err.Error(), "--max-formulas") {
		t.Fatalf("err = %v, want one naming the variable and the flag", err)
	}
}

func TestUsage(t *testing.T) {
	fs, _, _, _ := newFlags()
	var b bytes.Buffer
	Usage(&b, fs, "svc", "svc does things.", map[string]string{"labels": "GANTRY_EXECUTOR_LABELS"})
	out := b.String()
	for _, want := range []string{
		"Usage: svc [flags]",
		"  --max-formulas int\n        formulas running at once ($GANTRY_MAX_FORMULAS; default 64)\n",
		"  --labels string\n        zone=ZONE ($GANTRY_EXECUTOR_LABELS; default none)\n",
		"  --server string\n        NATS URL ($NATS_URL, else the context's)\n",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("usage lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "\n  -max") {
		t.Errorf("single-dash flag in usage:\n%s", out)
	}
}
