package metricsserve

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

var testCounter = promauto.NewCounter(prometheus.CounterOpts{Name: "gantry_metricsserve_test_total", Help: "test"})

func TestStartServesMetrics(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Start(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	before := testutil.ToFloat64(testCounter) // the registry is the process's: other runs of the test count too
	testCounter.Add(3)
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr.String() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := get(Path)
	if want := fmt.Sprintf("gantry_metricsserve_test_total %v", before+3); code != 200 || !strings.Contains(body, want) {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	if code, _ := get("/"); code != 404 {
		t.Fatalf("GET /: %d, want 404", code)
	}
}

func TestStartOff(t *testing.T) {
	addr, err := Start(context.Background(), "", nil)
	if addr != nil || err != nil {
		t.Fatalf("Start(\"\") = %v, %v; want nothing", addr, err)
	}
}

func TestStartBadAddress(t *testing.T) {
	_, err := Start(context.Background(), "127.0.0.1:notaport", nil)
	if err == nil || !strings.Contains(err.Error(), "--metrics 127.0.0.1:notaport") {
		t.Fatalf("err = %v, want one naming --metrics and the address", err)
	}
}

// TestOnlyGET: the metrics endpoint only reads: other methods get 405.
func TestOnlyGET(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr, err := Start(ctx, "127.0.0.1:0", nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete} {
		req, _ := http.NewRequest(m, "http://"+addr.String()+Path, strings.NewReader("x"))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s %s: %d, want 405", m, Path, resp.StatusCode)
		}
	}
}
