package cli

import (
	"io"
	"log/slog"
)

type slogLogger = slog.Logger

// newQuietLogger logs errors only, as text, for the CLI.
func newQuietLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelError}))
}
