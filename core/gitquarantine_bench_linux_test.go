//go:build linux

package core

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// BenchmarkExecuteGitScan is one Execute (fake driver, in-memory gRPC) in
// a workspace of dirs directories (ten files each), with the search for
// planted git repositories after it (scan) and without (off): the ratio is
// what the search adds to a command on a tree of that size. The fake
// driver runs nothing, so the ratio is against the core's own overhead;
// against a real sandboxed command (tens of milliseconds) it is smaller.
func BenchmarkExecuteGitScan(b *testing.B) {
	for _, dirs := range []int{1_000, 10_000, 50_000} {
		cfg := testConfig(b)
		h := newHarness(b, cfg, &drivertest.FakeDriver{})
		ctx := WithSession(context.Background(), "bench")
		ws, err := h.sb.WorkspacePath("bench")
		if err != nil {
			b.Fatal(err)
		}
		for i := range dirs {
			d := filepath.Join(ws, fmt.Sprintf("d%d", i%100), fmt.Sprintf("e%d", i/100%10), fmt.Sprintf("f%d", i))
			if err := os.MkdirAll(d, 0o700); err != nil {
				b.Fatal(err)
			}
			for j := range 10 {
				if err := os.WriteFile(filepath.Join(d, fmt.Sprint(j)), nil, 0o600); err != nil {
					b.Fatal(err)
				}
			}
		}
		cmd := Command{Program: "echo", Args: []string{"hi"}}
		for _, mode := range []string{"off", "scan"} {
			b.Run(fmt.Sprintf("dirs=%d/%s", dirs, mode), func(b *testing.B) {
				h.sb.gitScanOff = mode == "off"
				for b.Loop() {
					out, err := h.sb.Execute(ctx, cmd)
					if err != nil {
						b.Fatal(err)
					}
					if out.GitQuarantine != nil {
						b.Fatalf("a harmless command reported %+v", out.GitQuarantine)
					}
				}
			})
		}
	}
}
