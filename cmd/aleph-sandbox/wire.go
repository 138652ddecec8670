package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/go-hclog"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/cmd/aleph-sandbox/internal/termsafe"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// runFlags are the flags exec and bench share: everything that shapes one
// command and the pipeline it runs through.
type runFlags struct {
	// layered is exec's --layered (registered by exec alone).
	layered       bool
	driver        string
	config        string
	session       string
	workspaceRoot string
	workspace     string
	cwd           string
	read, write   listFlag
	net           string
	spawn         bool
	memoryMB      uint64
	timeout       time.Duration
	maxOutput     int64
	env           listFlag
	stdin         bool
	yes           bool
	json          bool
	grace         time.Duration
}

func (f *runFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&f.driver, "driver", "", "driver `NAME|PATH` (default: the platform's)")
	fs.StringVar(&f.config, "config", "", "TOML config `FILE` (default: $XDG_CONFIG_HOME/aleph-sandbox/config.toml if present)")
	fs.StringVar(&f.session, "session", "cli", "session `ID`; its workspace is reused across calls")
	fs.StringVar(&f.workspaceRoot, "workspace-root", "", "workspace root `DIR` (overrides sandbox.workspace_root)")
	fs.StringVar(&f.workspace, "workspace", "", "run in this existing `DIR` as the workspace")
	fs.StringVar(&f.cwd, "cwd", "", "working `DIR`, inside the workspace")
	fs.Var(&f.read, "read", "extra readable `PATH` (repeatable)")
	fs.Var(&f.write, "write", "extra writable `PATH` (repeatable)")
	fs.StringVar(&f.net, "net", "none", "network `none|all|HOST[,HOST...]`: no network, all of it, or only these hosts through the proxy")
	fs.BoolVar(&f.spawn, "spawn", false, "allow subprocesses")
	fs.Var((*positiveUint64)(&f.memoryMB), "memory", "memory limit in `MB`")
	fs.Var((*timeoutDuration)(&f.timeout), "timeout", "wall-clock limit `DURATION` (e.g. 30s); 0 or leaving it out: sandbox.default_timeout_seconds, 60 s unless configured")
	fs.Var((*positiveInt64)(&f.maxOutput), "max-output", "output budget in `BYTES`, shared by stdout and stderr (split evenly); default sandbox.max_output_bytes, 1 MiB unless configured")
	fs.Var(&f.env, "env", "set `NAME=VALUE` in the child (repeatable)")
	fs.BoolVar(&f.stdin, "stdin", false, "feed standard input to the child")
	fs.BoolVar(&f.yes, "yes", false, "approve every elevation without asking")
	fs.BoolVar(&f.json, "json", false, "print one JSON object instead of the child's output")
	f.grace = defaultSignalGrace
	fs.Var((*positiveDuration)(&f.grace), "grace", "after SIGINT, SIGTERM or SIGHUP is forwarded, the `DURATION` the command may take to end before its tree is killed")
}

// The limits are positive when given: 0 would otherwise read as "not
// given" and quietly mean the default. --timeout is the exception: 0 is
// the default there, as timeout_seconds 0 is on the wire, in the Python
// and TypeScript clients, in MCP and in the Go Request (one meaning
// everywhere; there is no unlimited timeout).
type (
	timeoutDuration  time.Duration
	positiveDuration time.Duration
	positiveInt64    int64
	positiveUint64   uint64
)

func (d *positiveDuration) String() string { return time.Duration(*d).String() }
func (d *positiveDuration) Set(v string) error {
	x, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration (e.g. 30s, 2m)")
	}
	if x <= 0 {
		return errors.New("must be positive")
	}
	*d = positiveDuration(x)
	return nil
}

func (d *timeoutDuration) String() string { return time.Duration(*d).String() }
func (d *timeoutDuration) Set(v string) error {
	// A bare 0 is a duration too (time.ParseDuration takes "0").
	x, err := time.ParseDuration(v)
	if err != nil {
		return errors.New("not a duration (e.g. 30s, 2m; 0 for the default)")
	}
	if x < 0 {
		return errors.New("must not be negative (0 or leaving it out: sandbox.default_timeout_seconds)")
	}
	*d = timeoutDuration(x)
	return nil
}

func (n *positiveInt64) String() string { return strconv.FormatInt(int64(*n), 10) }
func (n *positiveInt64) Set(v string) error {
	x, err := strconv.ParseInt(v, 10, 64)
	if err != nil || x <= 0 {
		return errors.New("must be a positive integer")
	}
	*n = positiveInt64(x)
	return nil
}

func (n *positiveUint64) String() string { return strconv.FormatUint(uint64(*n), 10) }
func (n *positiveUint64) Set(v string) error {
	x, err := strconv.ParseUint(v, 10, 64)
	if err != nil || x == 0 {
		return errors.New("must be a positive integer")
	}
	*n = positiveUint64(x)
	return nil
}

type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// usageError is bad command-line input: exit 125 with the reason.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

// request maps the flags and the program onto the one request type
// (alephsandbox.Request), which every front end shares: the CLI reads
// only its own syntax here (NAME=VALUE, standard input), and the request
// validates the rest.
func (f *runFlags) request(program string, args []string, stdin io.Reader) (alephsandbox.Request, error) {
	wd, err := os.Getwd()
	if err != nil {
		return alephsandbox.Request{}, &usageError{fmt.Sprintf("the current directory: %v", err)}
	}
	req := alephsandbox.Request{
		Layered:        f.layered,
		Session:        f.session,
		Argv:           append([]string{program}, args...),
		Workspace:      f.workspace,
		Cwd:            f.cwd,
		Read:           f.read,
		Write:          f.write,
		Net:            f.net,
		Spawn:          f.spawn,
		MemoryMB:       f.memoryMB,
		TimeoutSeconds: f.timeout.Seconds(),
		MaxOutputBytes: f.maxOutput,
		Dir:            wd,
	}
	if len(f.env) > 0 {
		req.Env = map[string]string{}
		for _, kv := range f.env {
			name, value, ok := strings.Cut(kv, "=")
			if !ok || name == "" {
				return alephsandbox.Request{}, &usageError{fmt.Sprintf("--env %q: want NAME=VALUE", kv)}
			}
			if !isPortableEnvName(name) {
				return alephsandbox.Request{}, &usageError{fmt.Sprintf("--env %q: %q is not a variable name (letters, digits and _, not starting with a digit)", kv, name)}
			}
			if _, dup := req.Env[name]; dup {
				return alephsandbox.Request{}, &usageError{fmt.Sprintf("--env %s given twice", name)}
			}
			req.Env[name] = value
		}
	}
	if f.stdin {
		data, err := io.ReadAll(io.LimitReader(stdin, driverapi.MaxStdinBytes+1))
		if err != nil {
			return alephsandbox.Request{}, &usageError{fmt.Sprintf("reading standard input: %v", err)}
		}
		if len(data) > driverapi.MaxStdinBytes {
			return alephsandbox.Request{}, &usageError{fmt.Sprintf("--stdin: standard input is larger than %d bytes (-i streams it with no limit)", driverapi.MaxStdinBytes)}
		}
		req.Stdin = data
	}
	return req, nil
}

// command is the flags and the program as the pipeline's command, through
// request.
func (f *runFlags) command(program string, args []string, stdin io.Reader) (core.Command, error) {
	req, err := f.request(program, args, stdin)
	if err != nil {
		return core.Command{}, err
	}
	return req.Command()
}

// isPortableEnvName reports whether name is a POSIX shell variable name,
// [A-Za-z_][A-Za-z0-9_]*. The driver protocol accepts more (anything
// without '=' or NUL, as the OS does), but a name a shell cannot expand
// given on the command line is a typo (--env 'A B=1') far more often than
// intended, and only the CLI applies this stricter rule.
func isPortableEnvName(name string) bool {
	for i, c := range name {
		switch {
		case c == '_', c >= 'A' && c <= 'Z', c >= 'a' && c <= 'z':
		case c >= '0' && c <= '9' && i > 0:
		default:
			return false
		}
	}
	return name != ""
}

func absPath(p string) (string, error) {
	if p == "" {
		return "", errors.New("empty path")
	}
	return filepath.Abs(p)
}

// loadConfig reads --config, or the per-user default file when it exists,
// or only defaults and environment overrides.
func loadConfig(path, workspaceRoot, driver string) (core.Config, error) {
	if path == "" {
		if def := alephsandbox.DefaultConfigPath(); def != "" {
			if _, err := os.Stat(def); err == nil {
				path = def
			}
		}
	}
	cfg, err := alephsandbox.LoadConfig(path)
	if err != nil {
		return core.Config{}, err
	}
	if workspaceRoot != "" {
		abs, err := absPath(workspaceRoot)
		if err != nil {
			return core.Config{}, &usageError{fmt.Sprintf("--workspace-root %q: %v", workspaceRoot, err)}
		}
		cfg.Sandbox.WorkspaceRoot = abs
	}
	if driver != "" {
		cfg.Sandbox.Driver = driver
	}
	return cfg, cfg.Validate()
}

// cliLogger keeps the CLI's own and the plugins' log lines off the child's
// stdout and stderr unless asked for: ALEPH_SANDBOX_LOG=LEVEL sends them to
// stderr, ALEPH_SANDBOX_LOG_FILE=PATH to a file. A level hclog does not know
// or a file that cannot be opened is refused: ignoring it would leave the
// user looking for logs that are never written.
func cliLogger() (hclog.Logger, func(), error) {
	raw := os.Getenv("ALEPH_SANDBOX_LOG")
	level := hclog.LevelFromString(raw)
	if level == hclog.NoLevel && strings.TrimSpace(raw) != "" {
		return nil, func() {}, &usageError{fmt.Sprintf("ALEPH_SANDBOX_LOG=%q: not a log level (want trace, debug, info, warn, error or off)", raw)}
	}
	if file := os.Getenv("ALEPH_SANDBOX_LOG_FILE"); file != "" {
		f, err := openLogFile(file)
		if err != nil {
			return nil, func() {}, &usageError{fmt.Sprintf("ALEPH_SANDBOX_LOG_FILE=%q: %v", file, err)}
		}
		if level == hclog.NoLevel {
			level = hclog.Info
		}
		return hclog.New(&hclog.LoggerOptions{Name: "aleph-sandbox", Output: f, Level: level}), func() { _ = f.Close() }, nil
	}
	if level == hclog.NoLevel {
		return hclog.NewNullLogger(), func() {}, nil
	}
	return hclog.New(&hclog.LoggerOptions{Name: "aleph-sandbox", Output: os.Stderr, Level: level}), func() {}, nil
}

// openLogFile opens the log file for appending, creating it (not its
// directory). It is opened without blocking: a FIFO nobody reads would
// otherwise hang the CLI at the open; one with a reader works.
func openLogFile(path string) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_WRONLY|os.O_APPEND|logOpenFlags, 0o600)
	if err != nil {
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("cannot be created: its directory %s does not exist", filepath.Dir(path))
		}
		return nil, fmt.Errorf("cannot be opened for writing: %w", err)
	}
	if st, err := f.Stat(); err == nil && st.IsDir() {
		f.Close()
		return nil, errors.New("is a directory")
	}
	return f, nil
}

// pipeline is one warm runtime and the CLI's log file.
type pipeline struct {
	sandbox *alephsandbox.Runtime
	closers []func()
}

func (p *pipeline) Close() {
	if p.sandbox != nil {
		_ = p.sandbox.Close()
	}
	for i := len(p.closers) - 1; i >= 0; i-- {
		p.closers[i]()
	}
}

// buildPipeline is the assembled runtime (package alephsandbox) with the
// CLI's approver, logger and warning line; the CLI builds no part of the
// pipeline itself.
func buildPipeline(cfg core.Config, approver core.ApprovalRequester, warn io.Writer, opts ...alephsandbox.Option) (*pipeline, error) {
	logger, closeLog, err := cliLogger()
	if err != nil {
		return nil, err
	}
	p := &pipeline{closers: []func(){closeLog}}
	rt, err := alephsandbox.New(cfg, append([]alephsandbox.Option{
		alephsandbox.WithLogger(logger),
		alephsandbox.WithApprover(approver),
		alephsandbox.WithWarnings(warn),
	}, opts...)...)
	if err != nil {
		p.Close()
		return nil, err
	}
	p.sandbox = rt
	return p, nil
}

// approver answers elevation requests for the CLI: --yes approves, a
// terminal is asked, and with neither the answer is no.
type approver struct {
	yes      bool
	terminal bool
	prompt   io.Writer
	// answers reads the user's reply; nil means there is no one to ask.
	answers func() (io.ReadCloser, error)
}

func (a *approver) RequestApproval(ctx context.Context, req driverapi.ApprovalRequest) (driverapi.ApprovalOutcome, error) {
	if a.yes {
		return driverapi.ApprovalApproved, nil
	}
	if !a.terminal || a.answers == nil {
		return driverapi.ApprovalDenied, nil
	}
	in, err := a.answers()
	if err != nil {
		return driverapi.ApprovalDenied, nil
	}
	// What runs and where, before the question: the summary alone says
	// what is asked, not by whom. Every part is shown escaped, so a
	// command line cannot draw a prompt of its own on the terminal.
	if req.Program != "" {
		fmt.Fprintf(a.prompt, "aleph-sandbox: session %s runs: %s\n", shown(req.SessionID), commandLine(req.Program, req.Args))
	}
	fmt.Fprintf(a.prompt, "aleph-sandbox: %s (a yes is kept as a grant of the session): allow? [y/N] ", oneLine(req.Summary))
	answer := make(chan string, 1)
	go func() {
		line, _ := bufio.NewReader(in).ReadString('\n')
		answer <- strings.ToLower(strings.TrimSpace(line))
	}()
	select {
	case <-ctx.Done():
		_ = in.Close()
		fmt.Fprintln(a.prompt)
		return driverapi.ApprovalTimeout, nil
	case line := <-answer:
		_ = in.Close()
		if line == "y" || line == "yes" {
			return driverapi.ApprovalApproved, nil
		}
		return driverapi.ApprovalDenied, nil
	}
}

// maxShownCommand bounds the command line an approval prompt shows.
const maxShownCommand = 300

// commandLine is program and args as a prompt shows them
// (termsafe.CommandLine), cut at maxShownCommand.
func commandLine(program string, args []string) string {
	return termsafe.CommandLine(program, args, maxShownCommand)
}

// ttyAnswers opens the controlling terminal, so the question can be asked
// even when standard input is the child's (--stdin).
func ttyAnswers() (io.ReadCloser, error) { return os.Open("/dev/tty") }

func itoa(n int) string { return strconv.Itoa(n) }

func goos() string { return runtime.GOOS }
