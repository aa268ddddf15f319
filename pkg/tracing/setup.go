package tracing

import (
	"context"
	"fmt"
	"io"
	"os"

	"github.com/gantry-dev/gantry/pkg/buildinfo"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/exporters/stdout/stdouttrace"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.43.0"
)

// ExporterEnv is the standard variable that picks the span exporter:
// "otlp" (the default: OTLP/HTTP once an endpoint is set), "console"
// (each span printed as JSON on stderr) or "none".
const ExporterEnv = "OTEL_TRACES_EXPORTER"

// Getenv reads an environment variable: os.Getenv in a process, what a
// test sets otherwise. The package reads none itself; the OTLP exporter
// and the resource read the standard OTEL_* variables as OpenTelemetry's
// SDK does, once getenv says spans are exported.
type Getenv func(string) string

// Configured says spans are exported: OTEL_TRACES_EXPORTER is "console",
// or the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) variable names a collector and
// OTEL_TRACES_EXPORTER is not "none".
func Configured(getenv Getenv) bool {
	switch getenv(ExporterEnv) {
	case "console":
		return true
	case "none":
		return false
	}
	return getenv("OTEL_EXPORTER_OTLP_ENDPOINT") != "" || getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") != ""
}

// Console is where OTEL_TRACES_EXPORTER=console prints spans.
var Console io.Writer = os.Stderr

// NewProvider is a tracer provider for service (the service.name
// resource, with service.version and whatever OTEL_RESOURCE_ATTRIBUTES
// adds) exporting to exp; batch batches the exports (a test's in-memory
// exporter wants them at once). Shut it down to flush.
func NewProvider(ctx context.Context, service, version string, exp sdktrace.SpanExporter, batch bool) (*sdktrace.TracerProvider, error) {
	res, err := resource.New(ctx, resource.WithFromEnv(), resource.WithAttributes(semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, fmt.Errorf("trace resource: %w", err)
	}
	export := sdktrace.WithSyncer(exp)
	if batch {
		export = sdktrace.WithBatcher(exp)
	}
	return sdktrace.NewTracerProvider(export, sdktrace.WithResource(res), sdktrace.WithIDGenerator(idGenerator{})), nil
}

// FromEnv is the Tracer of service (the variables read with getenv), its spans carrying this build's
// version (buildinfo.Version): printing them on Console with
// OTEL_TRACES_EXPORTER=console, else exporting over OTLP/HTTP when
// Configured (every standard OTEL_EXPORTER_OTLP_* variable applies:
// endpoint, headers, timeout, TLS, compression), else nil (nothing is
// recorded). shutdown flushes what is pending; call it on the way out.
func FromEnv(ctx context.Context, service string, getenv Getenv) (t *Tracer, shutdown func(context.Context) error, err error) {
	if !Configured(getenv) {
		return nil, func(context.Context) error { return nil }, nil
	}
	exp, err := exporter(ctx, getenv)
	if err != nil {
		return nil, nil, err
	}
	tp, err := NewProvider(ctx, service, buildinfo.Version(), exp, true)
	if err != nil {
		return nil, nil, err
	}
	return New(tp), tp.Shutdown, nil
}

// exporter is the span exporter OTEL_TRACES_EXPORTER names.
func exporter(ctx context.Context, getenv Getenv) (sdktrace.SpanExporter, error) {
	if getenv(ExporterEnv) == "console" {
		exp, err := stdouttrace.New(stdouttrace.WithWriter(Console))
		if err != nil {
			return nil, fmt.Errorf("console trace exporter: %w", err)
		}
		return exp, nil
	}
	exp, err := otlptracehttp.New(ctx)
	if err != nil {
		return nil, fmt.Errorf("OTLP trace exporter: %w", err)
	}
	return exp, nil
}
