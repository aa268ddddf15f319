package webview

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"

	"github.com/nats-io/nats.go"
	"go.opentelemetry.io/otel/trace"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

// TraceIDPlaceholder is what a trace URL template has where the trace id
// goes.
const TraceIDPlaceholder = "{trace_id}"

// TraceIDOf is the trace id of the W3C trace context in a message's
// headers (read by eventbus.ExtractTrace), or "" when it has none or a
// malformed one.
func TraceIDOf(h nats.Header) string {
	sc := trace.SpanContextFromContext(eventbus.ExtractTrace(context.Background(), h))
	if !sc.IsValid() {
		return ""
	}
	return sc.TraceID().String()
}

func lowerHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return s != ""
}

// ErrTraceURL: a trace URL template that is not an http(s) URL with
// {trace_id} in it.
var ErrTraceURL = errors.New("--trace-url")

// CheckTraceURL says what is wrong with a trace URL template (the
// --trace-url flag), nil when nothing: an absolute http or https URL
// with {trace_id} where the trace id goes, as in
// https://jaeger.example/trace/{trace_id}.
func CheckTraceURL(tmpl string) error {
	if !strings.Contains(tmpl, TraceIDPlaceholder) {
		return fmt.Errorf("%w: %q has no %s (e.g. https://jaeger.example/trace/%s)", ErrTraceURL, tmpl, TraceIDPlaceholder, TraceIDPlaceholder)
	}
	u, err := url.Parse(strings.ReplaceAll(tmpl, TraceIDPlaceholder, "0"))
	if err != nil {
		return fmt.Errorf("%w: %q is not a URL: %w", ErrTraceURL, tmpl, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" {
		return fmt.Errorf("%w: %q: want an http:// or https:// URL with a host", ErrTraceURL, tmpl)
	}
	return nil
}

// TraceLink is the template with the trace id in it, "" when either is
// missing or the id is not a trace id.
func TraceLink(tmpl, traceID string) string {
	if tmpl == "" || len(traceID) != 32 || !lowerHex(traceID) || CheckTraceURL(tmpl) != nil {
		return ""
	}
	return strings.ReplaceAll(tmpl, TraceIDPlaceholder, traceID)
}
