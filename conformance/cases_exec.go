package conformance

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func execCases() []Case {
	return []Case{
		{ID: "exec/argv-verbatim", Level: Must,
			Description: "Arguments with spaces, quotes, backslashes, newlines, glob and shell characters, and unicode reach the program byte for byte.",
			run:         caseArgvVerbatim},
		{ID: "exec/argv-empty-args", Level: Must,
			Description: "Empty-string arguments are passed as arguments, not dropped.",
			run: func(ctx context.Context, h *H) error {
				o := h.Probe(ctx, nil, "args", "", "x", "", "")
				if err := ok("probe", o); err != nil {
					return err
				}
				if string(o.Stdout) != "[][x][][]" {
					return fmt.Errorf("want four arguments [][x][][], got %q", o.Stdout)
				}
				return nil
			}},
		{ID: "exec/missing-program", Level: Must,
			Description: "A program that does not exist is reported as an error or a non-zero exit, never as success; an existing program succeeds.",
			run: func(ctx context.Context, h *H) error {
				o := h.Exec(ctx, Cmd{Program: filepath.Join(h.Work, "no-such-program")})
				if o.Err == nil && o.Exit.ExitCode == 0 && o.Exit.Signal == 0 {
					return fmt.Errorf("missing program reported success: %s", o)
				}
				return ok("existing program", h.Probe(ctx, nil, "exit", "0"))
			}},
		{ID: "exec/stdin-small", Level: Must,
			Description: "A few bytes of stdin reach the program.",
			run: func(ctx context.Context, h *H) error {
				return stdinRoundTrip(ctx, h, []byte("hello, stdin\n"))
			}},
		{ID: "exec/stdin-256k", Level: Must,
			Description: "256 KiB of random binary stdin reach the program intact.",
			run: func(ctx context.Context, h *H) error {
				b := make([]byte, 256<<10)
				_, _ = rand.Read(b)
				return stdinRoundTrip(ctx, h, b)
			}},
		{ID: "exec/stdin-max-size", Level: Must,
			Description: "Stdin of exactly driverapi.MaxStdinBytes (2 MiB) reaches the program intact.",
			run: func(ctx context.Context, h *H) error {
				b := make([]byte, driverapi.MaxStdinBytes)
				_, _ = rand.Read(b)
				o := h.Exec(ctx, h.ProbeCmd(Cmd{Stdin: b, MaxOutput: 2*driverapi.MaxStdinBytes + 2}, "cat"))
				if err := ok("cat", o); err != nil {
					return err
				}
				if !bytes.Equal(o.Stdout, b) {
					return fmt.Errorf("stdin of %d bytes came back as %d bytes (or different)", len(b), len(o.Stdout))
				}
				return nil
			}},
		{ID: "exec/stdin-unread", Level: Must,
			Description: "A program that exits without reading its 1 MiB of stdin ends normally; the driver neither hangs nor fails on the closed pipe.",
			run: func(ctx context.Context, h *H) error {
				o := h.Exec(ctx, h.ProbeCmd(Cmd{Stdin: make([]byte, 1<<20)}, "echo", "done"))
				if err := ok("probe ignoring stdin", o); err != nil {
					return err
				}
				if string(o.Stdout) != "done\n" {
					return fmt.Errorf("got %q", o.Stdout)
				}
				return nil
			}},
		{ID: "exec/workspace-program-runs", Level: Should,
			Description: "An executable written into the workspace under a new name (a #! script on POSIX, a copy of the probe .exe on Windows) can be run as the program itself (workspaces hold build outputs and scripts).",
			run: func(ctx context.Context, h *H) error {
				c, err := h.workspaceProgram()
				if err != nil {
					return err
				}
				o := h.Exec(ctx, c)
				if err := ok("workspace program", o); err != nil {
					return err
				}
				if string(o.Stdout) != "hello world\n" {
					return fmt.Errorf("got %q", o.Stdout)
				}
				return nil
			}},
		{ID: "exec/stdin-empty-eof", Level: Must,
			Description: "Without stdin the program reads end-of-file at once (it is not left waiting on an open descriptor).",
			run: func(ctx context.Context, h *H) error {
				o := h.Exec(ctx, h.ProbeCmd(Cmd{Timeout: 10e9}, "cat"))
				if err := ok("cat with no stdin", o); err != nil {
					return err
				}
				if len(o.Stdout) != 0 {
					return fmt.Errorf("cat printed %q", o.Stdout)
				}
				return nil
			}},
		{ID: "exec/env-exact", Level: Must, Feature: driverapi.FeatureEnvIsolation,
			Description: "The program sees exactly the environment in the RunSpec: nothing added, nothing dropped, values byte for byte.",
			run:         caseEnvExact},
		{ID: "exec/env-empty", Level: Must, Feature: driverapi.FeatureEnvIsolation,
			Description: "An empty RunSpec environment gives the program an empty environment.",
			run: func(ctx context.Context, h *H) error {
				o := h.Exec(ctx, h.ProbeCmd(Cmd{NoEnv: true}, "env"))
				if err := ok("env", o); err != nil {
					return err
				}
				if len(o.Stdout) != 0 {
					return fmt.Errorf("environment not empty: %s", envNames(o.Stdout))
				}
				return nil
			}},
		{ID: "exec/env-host-not-leaked", Level: Must, Feature: driverapi.FeatureEnvIsolation, fresh: true,
			Description: "A variable in the driver process's own environment does not reach the program, while the variables the RunSpec gives do.",
			run:         caseEnvHostNotLeaked},
		{ID: "exec/exit-codes", Level: Must,
			Description: "Exit statuses 0, 1, 2, 42, 126, 127, 128 and 255 are reported as given, with no signal.",
			run:         caseExitCodes},
		{ID: "exec/signal-reported", Level: Must, OS: POSIXOnly, OSReason: whySig,
			Description: "A program that dies of SIGTERM or SIGKILL is reported with that signal number and a non-zero exit code.",
			run:         caseSignal},
		{ID: "exec/cwd-honoured", Level: Must,
			Description: "The program starts in the RunSpec's cwd (a subdirectory of the workspace), and relative paths resolve there.",
			run:         caseCwd},
		{ID: "exec/stdout-stderr-apart", Level: Must,
			Description: "Interleaved stdout and stderr writes arrive on their own streams, each in order.",
			run: func(ctx context.Context, h *H) error {
				o := h.Probe(ctx, nil, "echo", "o1", sep, "eecho", "e1", sep, "echo", "o2", sep, "eecho", "e2", sep, "echo", "o3", sep, "eecho", "e3")
				if err := ok("probe", o); err != nil {
					return err
				}
				if string(o.Stdout) != "o1\no2\no3\n" || string(o.Stderr) != "e1\ne2\ne3\n" {
					return fmt.Errorf("streams mixed: %s", o)
				}
				return nil
			}},
		{ID: "exec/binary-output", Level: Must,
			Description: "Output bytes that are not text (NUL, 0xff, escape, carriage return) arrive unchanged.",
			run: func(ctx context.Context, h *H) error {
				o := h.Probe(ctx, nil, "hex", "610062ff631b640d650a")
				if err := ok("probe", o); err != nil {
					return err
				}
				if want := []byte("a\x00b\xffc\x1bd\re\n"); !bytes.Equal(o.Stdout, want) {
					return fmt.Errorf("got %q, want %q", o.Stdout, want)
				}
				return nil
			}},
		{ID: "exec/byte-counts", Level: Must,
			Description: "Exit.StdoutBytes and Exit.StderrBytes equal the bytes the program wrote, and Exit.Duration is not negative.",
			run: func(ctx context.Context, h *H) error {
				o := h.Probe(ctx, nil, "print", "12345", sep, "eprint", "1234567")
				if err := ok("probe", o); err != nil {
					return err
				}
				if o.Exit.StdoutBytes != 5 || o.Exit.StderrBytes != 7 || o.Exit.Duration < 0 {
					return fmt.Errorf("stdout_bytes=%d (want 5) stderr_bytes=%d (want 7) duration=%s", o.Exit.StdoutBytes, o.Exit.StderrBytes, o.Exit.Duration)
				}
				return nil
			}},
		{ID: "exec/output-streamed", Level: Must,
			Description: "Output reaches the host while the program runs: the program waits for a file the host creates only after seeing its first line.",
			run:         caseStreamed},
		{ID: "exec/threads-work", Level: Must,
			Description: "A program may start threads even when subprocesses are not allowed (four goroutines locked to OS threads of their own compute a sum).",
			run: func(ctx context.Context, h *H) error {
				o := h.Probe(ctx, &driverapi.Capabilities{}, "threads", "4")
				if err := ok("threads", o); err != nil {
					return err
				}
				if string(o.Stdout) != "sum=20\n" {
					return fmt.Errorf("got %q, want sum=20", o.Stdout)
				}
				return nil
			}},
	}
}

func caseArgvVerbatim(ctx context.Context, h *H) error {
	args := []string{"plain", "two words", `"double"`, `'single'`, `back\slash`, "new\nline", "tab\there",
		"$HOME", "*", "$(echo no)", "`echo no`", ";|&<>", "ünïcødé ✓ 日本", " lead", "trail ", "-n", "--", "="}
	o := h.Probe(ctx, nil, append([]string{"args"}, args...)...)
	if err := ok("probe", o); err != nil {
		return err
	}
	var want strings.Builder
	for _, a := range args {
		want.WriteString("[" + a + "]")
	}
	if string(o.Stdout) != want.String() {
		return fmt.Errorf("got %q, want %q", o.Stdout, want.String())
	}
	return nil
}

func stdinRoundTrip(ctx context.Context, h *H, in []byte) error {
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Stdin: in}, "cat"))
	if err := ok("cat", o); err != nil {
		return err
	}
	if !bytes.Equal(o.Stdout, in) {
		return fmt.Errorf("stdin of %d bytes came back as %d bytes (or different)", len(in), len(o.Stdout))
	}
	return nil
}

func caseEnvExact(ctx context.Context, h *H) error {
	env := h.envWith(
		driverapi.EnvVar{Name: "ALEPH_CONFORMANCE_A", Value: "with spaces and = signs"},
		driverapi.EnvVar{Name: "ALEPH_CONFORMANCE_B", Value: ""},
		driverapi.EnvVar{Name: "ALEPH_CONFORMANCE_UNI", Value: "ünï ✓"},
	)
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Env: env}, "env"))
	if err := ok("env", o); err != nil {
		return err
	}
	want := map[string]bool{}
	for _, e := range env {
		want[e.Name+"="+e.Value] = true
	}
	var extra []string
	got := map[string]bool{}
	for _, l := range strings.Split(strings.TrimSuffix(string(o.Stdout), "\n"), "\n") {
		got[l] = true
		if !want[l] {
			extra = append(extra, l)
		}
	}
	var missing []string
	for _, e := range env {
		if !got[e.Name+"="+e.Value] {
			missing = append(missing, e.Name)
		}
	}
	if len(extra) > 0 || len(missing) > 0 {
		return fmt.Errorf("added or changed: %s; missing or changed: %v", envNames([]byte(strings.Join(extra, "\n"))), missing)
	}
	return nil
}

// envNames lists the variable names of env output, never the values: a
// leaking driver's output holds the host's secrets.
func envNames(out []byte) string {
	var names []string
	for _, l := range strings.Split(string(out), "\n") {
		if n, _, ok := strings.Cut(l, "="); ok && n != "" {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if len(names) > 20 {
		return fmt.Sprintf("%v and %d more", names[:20], len(names)-20)
	}
	return fmt.Sprint(names)
}

func caseEnvHostNotLeaked(ctx context.Context, h *H) error {
	const canary = "ALEPH_CONFORMANCE_HOST_CANARY"
	p, err := h.launch(ctx, func(lc *driverapi.LaunchConfig) { lc.Env = append(lc.Env, canary+"=leaked") })
	if err != nil {
		return fmt.Errorf("launch: %w", err)
	}
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Driver: p.Driver(), Env: h.envWith(driverapi.EnvVar{Name: "GIVEN", Value: "yes"})}, "env"))
	if err := ok("env", o); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte(canary)) {
		return fmt.Errorf("the driver's own environment reached the program: %s", envNames(o.Stdout))
	}
	if !bytes.Contains(o.Stdout, []byte("GIVEN=yes\n")) {
		return fmt.Errorf("the given variable is missing: %s", envNames(o.Stdout))
	}
	return nil
}

func caseExitCodes(ctx context.Context, h *H) error {
	for _, code := range []int{0, 1, 2, 42, 126, 127, 128, 255} {
		o := h.Probe(ctx, nil, "exit", fmt.Sprint(code))
		if o.Err != nil {
			return fmt.Errorf("exit %d: %v", code, o.Err)
		}
		if o.Exit.ExitCode != int32(code) || o.Exit.Signal != 0 {
			return fmt.Errorf("exit %d reported as %s", code, o)
		}
	}
	return nil
}

func caseSignal(ctx context.Context, h *H) error {
	for _, sig := range []struct {
		name string
		num  int32
	}{{"TERM", 15}, {"KILL", 9}} {
		o := h.Probe(ctx, nil, "echo", "before", sep, "kill", sig.name, sep, "echo", "after")
		if o.Err != nil {
			return fmt.Errorf("SIG%s: %v", sig.name, o.Err)
		}
		if err := ran("SIG"+sig.name, o, "before"); err != nil {
			return err
		}
		if o.Exit.Signal != sig.num || o.Exit.ExitCode == 0 {
			return fmt.Errorf("death by SIG%s reported as %s", sig.name, o)
		}
	}
	return nil
}

func caseCwd(ctx context.Context, h *H) error {
	sub := filepath.Join(h.Work, "sub", "dir")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		return err
	}
	o := h.Exec(ctx, h.ProbeCmd(Cmd{Cwd: sub}, "pwd", sep, "write", "rel.txt", "hi\n"))
	if err := ok("probe", o); err != nil {
		return err
	}
	if got := strings.TrimSpace(string(o.Stdout)); !h.samePath(got, sub) {
		return fmt.Errorf("pwd is %q, want %q", got, sub)
	}
	if readHost(filepath.Join(sub, "rel.txt")) != "hi\n" {
		return fmt.Errorf("relative write did not land in the cwd")
	}
	return nil
}

func caseStreamed(ctx context.Context, h *H) error {
	gate := filepath.Join(h.Work, "gate")
	var once bool
	o := h.Exec(ctx, h.ProbeCmd(Cmd{
		OnStdout: func(b []byte) {
			if !once && bytes.Contains(b, []byte("first")) {
				once = true
				_ = os.WriteFile(gate, nil, 0o644)
			}
		},
	}, "echo", "first", sep, "waitfile", "gate", "10", sep, "echo", "second"))
	if err := ran("probe", o, "first"); err != nil {
		return err
	}
	if !bytes.Contains(o.Stdout, []byte("second")) {
		return fmt.Errorf("the first line did not reach the host before the program ended (output held back): %s", o)
	}
	return nil
}

// workspaceProgram writes a program into the workspace under a new name and
// returns the command that runs it with the argument "world": a #! script
// on POSIX, a copy of the probe on Windows (which runs no scripts itself).
func (h *H) workspaceProgram() (Cmd, error) {
	if h.suite.progs.posix() {
		p := filepath.Join(h.Work, "bin", "hello.sh")
		if err := writeFile(p, "#!/bin/sh\necho \"hello $1\"\n"); err != nil {
			return Cmd{}, err
		}
		return Cmd{Program: p, Args: []string{"world"}}, os.Chmod(p, 0o755)
	}
	src, err := h.suite.suiteProbe()
	if err != nil {
		return Cmd{}, err
	}
	p := filepath.Join(h.Work, "bin", "hello.exe")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return Cmd{}, err
	}
	if err := copyFile(src, p); err != nil {
		return Cmd{}, err
	}
	return Cmd{Program: p, Args: []string{probe.Magic, "echo", "hello", "world"}}, nil
}

// samePath compares paths as the host's file system does: Windows names
// are case-insensitive.
func (h *H) samePath(a, b string) bool {
	if h.suite.progs.posix() {
		return a == b
	}
	return strings.EqualFold(filepath.Clean(a), filepath.Clean(b))
}
