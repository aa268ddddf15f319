package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

func TestZZDebugSteps(t *testing.T) {
	files, _ := filepath.Glob(os.Getenv("ZZ_GLOB"))
	for _, f := range files {
		by, total, err := stepSeconds(context.Background(), f)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Printf("%s %.2fs: %s\n", filepath.Base(f), total, fmtPerNode(by, func(s string) string { return s }, 2))
	}
}
