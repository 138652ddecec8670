//go:build !windows

package driverapi

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestLaunchFailureQuotesPluginStderr: a plugin that exits before its
// handshake is explained by its own last stderr line, not only by
// go-plugin's guesses; a silent one gets no quote (control).
func TestLaunchFailureQuotesPluginStderr(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, script, want string
	}{
		{"says why", "echo 'noise first' >&2; echo 'aleph-driver-x: runs only on plan9' >&2; exit 3", "it wrote: aleph-driver-x: runs only on plan9"},
		{"silent", "exit 3", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := LaunchDriver(context.Background(), LaunchConfig{Path: p, StartTimeout: 10 * time.Second})
			var pe *PluginError
			if !errors.As(err, &pe) || pe.Op != "start" {
				t.Fatalf("launch of a plugin that exits: %T %v", err, err)
			}
			if tc.want == "" {
				if strings.Contains(err.Error(), "wrote") {
					t.Fatalf("a silent plugin quoted: %v", err)
				}
				return
			}
			if !strings.Contains(err.Error(), tc.want) || strings.Contains(err.Error(), "noise first") {
				t.Fatalf("error %q, want the last stderr line %q", err, tc.want)
			}
		})
	}
}

func TestTailWriterBounded(t *testing.T) {
	w := &tailWriter{max: 16}
	for i := 0; i < 100; i++ {
		w.Write([]byte("line that is long\n"))
	}
	w.Write([]byte("last\n"))
	if len(w.buf) > 16 || w.lastLine() != "last" {
		t.Fatalf("buf %d bytes, last line %q", len(w.buf), w.lastLine())
	}
}
