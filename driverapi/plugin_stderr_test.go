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
// go-plugin's guesses; a silent one gets no quote (control); one that
// writes to stdout is told so; go-plugin's notice for a missing cookie is
// recognised; escape sequences are not passed to the terminal.
func TestLaunchFailureQuotesPluginStderr(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, script, want string
		not                []string
	}{
		{"says why", "echo 'noise first' >&2; echo 'aleph-driver-x: runs only on plan9' >&2; exit 3",
			"exited without a handshake; it wrote: aleph-driver-x: runs only on plan9", []string{"noise first"}},
		{"silent", "exit 3", "exited without a handshake, writing nothing on stderr", []string{"wrote:"}},
		{"stdout", "echo 'Starting my driver'; echo 'oops' >&2; exit 1",
			`the driver wrote to stdout before its handshake (stdout is the plugin protocol's channel; log to stderr): first line: "Starting my driver"`,
			[]string{"Unrecognized", "architecture", "dynamic-link"}},
		{"cookie notice", `printf 'This binary is a plugin. These are not meant to be executed directly.\nPlease execute the program that consumes these plugins, which will\nload any plugins automatically\n' >&2; exit 1`,
			"this binary is not an aleph-sandbox driver plugin (it printed go-plugin's notice for a missing magic cookie", []string{"load any plugins automatically"}},
		{"escapes", `printf 'bad \033]0;owned\007 thing\n' >&2; exit 1`, "it wrote: bad ?]0;owned? thing", []string{"\x1b", "\a"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-"))
			if err := os.WriteFile(p, []byte("#!/bin/sh\n"+tc.script+"\n"), 0o755); err != nil {
				t.Fatal(err)
			}
			_, err := LaunchDriver(context.Background(), LaunchConfig{Path: p, StartTimeout: 10 * time.Second})
			var pe *PluginError
			var he *HandshakeError
			if !errors.As(err, &pe) || pe.Op != "start" || !errors.As(err, &he) {
				t.Fatalf("launch of a plugin that exits: %T %v", err, err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q, want %q", err, tc.want)
			}
			for _, n := range tc.not {
				if strings.Contains(err.Error(), n) {
					t.Fatalf("error %q contains %q", err, n)
				}
			}
		})
	}
}

// write feeds w the way go-plugin does: each line, then its newline.
func write(w *stderrLog, text string) {
	for _, l := range strings.SplitAfter(text, "\n") {
		line, nl := strings.CutSuffix(l, "\n")
		w.Write([]byte(line))
		if nl {
			w.Write([]byte("\n"))
		}
	}
}

func TestStderrLogLastWords(t *testing.T) {
	for _, tc := range []struct{ name, stderr, want string }{
		{"go panic", `{"@level":"info","@message":"serving"}
panic: boom at start

goroutine 1 [running]:
main.main()
	/src/drv/main.go:157 +0x171
`, "panic: boom at start (in main.main at /src/drv/main.go:157)"},
		{"method and runtime frames", `panic: runtime error: invalid memory address or nil pointer dereference [recovered]
	panic: again
[signal SIGSEGV: segmentation violation code=0x1 addr=0x0 pc=0x4a]

goroutine 7 [running]:
panic({0x5e, 0x8})
	/usr/local/go/src/runtime/panic.go:785 +0x132
runtime.gopanic(0x1)
	/usr/local/go/src/runtime/panic.go:100 +0x1
main.(*driver).Run(0xc000010000, {0x6b, 0xc0})
	/src/drv/run.go:42 +0x1d
created by google.golang.org/grpc.(*Server).serveStreams
`, "panic: runtime error: invalid memory address or nil pointer dereference [recovered] (in main.(*driver).Run at /src/drv/run.go:42)"},
		{"fatal error", "fatal error: concurrent map writes\n\ngoroutine 9 [running]:\nmain.worker()\n\t/src/w.go:3 +0x9\n\ngoroutine 1 [select]:\nmain.main()\n\t/src/m.go:1 +0x1\n",
			"fatal error: concurrent map writes (in main.worker at /src/w.go:3)"},
		{"recovered and went on", "panic: once\n\ngoroutine 1 [running]:\nmain.main()\n\t/m.go:1 +0x1\n" + `{"@level":"error","@message":"backend lost","error":"EOF"}` + "\n",
			"backend lost error=EOF"},
		{"plain last line", "starting\nfailed: no /dev/kvm\n\n", "failed: no /dev/kvm"},
		{"no newline", "starting\nlast words", "last words"},
		{"nothing", "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &stderrLog{}
			write(w, tc.stderr)
			if got := w.lastWords(); got != tc.want {
				t.Fatalf("last words %q, want %q", got, tc.want)
			}
		})
	}
}

// Whatever a plugin writes, the host keeps a bounded amount of it, and
// shows a bounded line.
func TestStderrLogBounded(t *testing.T) {
	w := &stderrLog{}
	long := strings.Repeat("x", 1<<20)
	w.Write([]byte(long)) // one huge line, no newline yet
	if len(w.partial) > stderrLineMax {
		t.Fatalf("kept %d bytes of one line", len(w.partial))
	}
	w.Write([]byte("\n"))
	for i := 0; i < 1000; i++ {
		w.Write([]byte(strings.Repeat("line that is long ", 40) + "\n"))
	}
	w.Write([]byte("panic: " + long + "\n"))
	if len(w.partial) > stderrLineMax || len(w.last) > stderrLineMax || len(w.panicLine) > stderrLineMax {
		t.Fatalf("kept partial %d, last %d, panic %d bytes", len(w.partial), len(w.last), len(w.panicLine))
	}
	if got := w.lastWords(); len(got) > lastWordsMax+3 || !strings.HasPrefix(got, "panic: xxx") {
		t.Fatalf("last words %d bytes: %.40q", len(got), got)
	}
}
