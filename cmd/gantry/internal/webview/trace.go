package webview

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
)

// TraceIDPlaceholder is what a trace URL template has where the trace id
// goes.
const TraceIDPlaceholder = "{trace_id}"

// TraceIDOf is the trace id of a W3C traceparent header
// ("00-<32 hex>-<16 hex>-<2 hex>"), or "" when the header is absent or not
// one (malformed, or the all-zero id, which names no trace).
func TraceIDOf(traceparent string) string {
	parts := strings.Split(strings.TrimSpace(traceparent), "-")
	if len(parts) < 4 || len(parts[0]) != 2 || parts[0] == "ff" || !lowerHex(parts[0]) {
		return ""
	}
	if parts[0] == "00" && len(parts) != 4 {
		return ""
	}
	id, span, flags := parts[1], parts[2], parts[3]
	if len(id) != 32 || len(span) != 16 || len(flags) != 2 || !lowerHex(id) || !lowerHex(span) || !lowerHex(flags) {
		return ""
	}
	if strings.Trim(id, "0") == "" || strings.Trim(span, "0") == "" {
		return ""
	}
	return id
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
