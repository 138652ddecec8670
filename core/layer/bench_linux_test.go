//go:build linux

package layer

import (
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// benchLayer makes a workspace of files files in dirs directories and a
// layer whose upper layer holds changed of them as overlayfs leaves them
// (copied-up directories, modified files, half of the same size as the
// host's so their content is compared), without mounting: the cost of
// reading a layer does not depend on how it was written.
func benchLayer(b *testing.B, files, dirs, changed int) *Layer {
	b.Helper()
	root := b.TempDir()
	ws := filepath.Join(root, "ws")
	benchWorkspace(b, ws, files, dirs)
	return benchUpper(b, filepath.Join(root, "layer"), ws, changed, "")
}

// benchWorkspace writes files files in dirs directories below ws.
func benchWorkspace(b *testing.B, ws string, files, dirs int) {
	for d := 0; d < dirs; d++ {
		dp := filepath.Join(ws, fmt.Sprintf("d%03d", d))
		if err := os.MkdirAll(dp, 0o755); err != nil {
			b.Fatal(err)
		}
		for i := 0; i < files/dirs; i++ {
			if err := os.WriteFile(filepath.Join(dp, fmt.Sprintf("f%04d.txt", i)), []byte(fmt.Sprintf("file %d of %d\n", i, d)), 0o644); err != nil {
				b.Fatal(err)
			}
		}
	}
}

// benchUpper makes a layer over ws whose upper layer changes changed of
// its files (suffix varies the content) and observes it.
func benchUpper(b *testing.B, dir, ws string, changed int, suffix string) *Layer {
	l, err := Create(context.Background(), dir, ws, nil, Policy{})
	if err != nil {
		b.Fatal(err)
	}
	up := filepath.Join(l.dir, UpperDir)
	for i := 0; i < changed; i++ {
		d := fmt.Sprintf("d%03d", i%10)
		if err := os.MkdirAll(filepath.Join(up, d), 0o755); err != nil {
			b.Fatal(err)
		}
		// File i/10 of directory i%10: a host file in every workspace size.
		content := fmt.Sprintf("file %d of %d\n", i/10, i%10)
		if i%2 == 0 {
			content = fmt.Sprintf("FILE %d of %d\n", i/10, i%10) // same size, other content
		} else {
			content += "and a new line\n"
		}
		content += suffix
		if err := os.WriteFile(filepath.Join(up, d, fmt.Sprintf("f%04d.txt", i/10)), []byte(content), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	if err := l.Observe(context.Background()); err != nil {
		b.Fatal(err)
	}
	// Write back what setup wrote, so that its flushing does not land in
	// the measurement.
	unix.Sync()
	return l
}

// BenchmarkChanges: 100 changed files in a 50,000-file workspace (the
// goal: 50 ms or less; it reads the upper layer, not the tree).
func BenchmarkChanges(b *testing.B) {
	for _, n := range []int{5_000, 50_000} {
		b.Run(fmt.Sprintf("workspace=%d/changed=100", n), func(b *testing.B) {
			l := benchLayer(b, n, 500, 100)
			b.ResetTimer()
			c0 := cpuTime()
			for i := 0; i < b.N; i++ {
				cs, err := l.Changes(context.Background())
				if err != nil {
					b.Fatal(err)
				}
				if len(cs) != 100 {
					b.Fatalf("%d changes", len(cs))
				}
			}
			// The machine may be shared: the CPU time spent says what the
			// work costs when the wall clock also counts waiting for a core.
			b.ReportMetric(float64(cpuTime()-c0)/1e6/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkChangesVsWalk: Changes on a layer over a 50,000-file
// workspace with 300 changed files, beside a plain filepath.WalkDir of the
// same upper directory, one of each per iteration so both see the same
// machine load. Reported: each one's wall ms per call and the ratio
// (Changes / WalkDir). WalkDir reads the upper's directories and nothing
// else; Changes reads them too, and for each upper entry its xattrs, the
// host's entry at the same path and, for a file of the host's size, both
// contents. Neither reads the rest of the workspace, so both stay flat as
// the workspace grows (the 5,000-file case says so).
func BenchmarkChangesVsWalk(b *testing.B) {
	for _, n := range []int{5_000, 50_000} {
		b.Run(fmt.Sprintf("workspace=%d/changed=300", n), func(b *testing.B) {
			l := benchLayer(b, n, 500, 300)
			up := filepath.Join(l.dir, UpperDir)
			ctx := context.Background()
			var changes, walk time.Duration
			b.ResetTimer()
			for i := 0; i < b.N; i++ {
				t0 := time.Now()
				cs, err := l.Changes(ctx)
				t1 := time.Now()
				if err != nil {
					b.Fatal(err)
				}
				if len(cs) != 300 {
					b.Fatalf("%d changes", len(cs))
				}
				entries := 0
				if err := filepath.WalkDir(up, func(string, fs.DirEntry, error) error { entries++; return nil }); err != nil {
					b.Fatal(err)
				}
				changes, walk = changes+t1.Sub(t0), walk+time.Since(t1)
				if entries < 300 {
					b.Fatalf("the walk saw %d entries", entries)
				}
			}
			b.ReportMetric(float64(changes.Microseconds())/1e3/float64(b.N), "changes-ms/op")
			b.ReportMetric(float64(walk.Microseconds())/1e3/float64(b.N), "walk-ms/op")
			b.ReportMetric(float64(changes)/float64(walk), "changes/walk")
		})
	}
}

// BenchmarkApply: applying 100 changed files; its cost grows with the
// changes, not the workspace (each iteration applies a new layer over the
// same workspace; making it is not timed).
func BenchmarkApply(b *testing.B) {
	for _, n := range []int{5_000, 50_000} {
		b.Run(fmt.Sprintf("workspace=%d/changed=100", n), func(b *testing.B) {
			root := b.TempDir()
			ws := filepath.Join(root, "ws")
			benchWorkspace(b, ws, n, 500)
			var cpu int64
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				l := benchUpper(b, filepath.Join(root, fmt.Sprintf("layer%d", i)), ws, 100, fmt.Sprintf("round %d\n", i))
				b.StartTimer()
				c0 := cpuTime()
				res, err := l.Apply(context.Background(), nil, ApplyOptions{})
				cpu += cpuTime() - c0
				if err != nil || len(res.Applied) != 100 {
					b.Fatalf("apply: %d applied, %+v, %v", len(res.Applied), res.Refused, err)
				}
			}
			b.ReportMetric(float64(cpu)/1e6/float64(b.N), "cpu-ms/op")
		})
	}
}

// BenchmarkDiff: the diff of the same 100 changes.
func BenchmarkDiff(b *testing.B) {
	l := benchLayer(b, 50_000, 500, 100)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := l.Diff(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// cpuTime is this process's user+system CPU time, in nanoseconds.
func cpuTime() int64 {
	var ru unix.Rusage
	if err := unix.Getrusage(unix.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
