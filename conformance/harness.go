package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// H is what a case works with: the driver under test, its capabilities,
// and a fresh layout of host directories that it removes afterwards.
type H struct {
	suite  *suite
	Driver driverapi.Driver
	Proc   *driverapi.Process
	Caps   driverapi.HostCapabilities
	// Root holds everything the case creates on the host (canonical path).
	Root string
	// Work is the workspace (Root/ws), Out a directory outside it (Root/out).
	Work, Out string

	mu       sync.Mutex
	cleanups []func()
}

func newH(s *suite, c Case) (*H, error) {
	dir := s.cfg.TempDir
	if dir == "" {
		dir = os.TempDir()
	}
	root, err := os.MkdirTemp(dir, "aleph-conformance-")
	if err != nil {
		return nil, err
	}
	if root, err = filepath.EvalSymlinks(root); err != nil {
		return nil, err
	}
	h := &H{suite: s, Caps: s.caps, Root: root, Work: filepath.Join(root, "ws"), Out: filepath.Join(root, "out")}
	h.defer_(func() { removeAll(root) })
	for _, d := range []string{h.Work, h.Out} {
		if err := os.Mkdir(d, 0o755); err != nil {
			h.cleanup()
			return nil, err
		}
	}
	if !c.fresh {
		h.Driver, h.Proc = s.shared.Driver(), s.shared
	}
	return h, nil
}

// defer_ registers f to run when the case ends, last registered first.
func (h *H) defer_(f func()) {
	h.mu.Lock()
	h.cleanups = append(h.cleanups, f)
	h.mu.Unlock()
}

func (h *H) cleanup() {
	h.mu.Lock()
	fs := h.cleanups
	h.cleanups = nil
	h.mu.Unlock()
	for i := len(fs) - 1; i >= 0; i-- {
		fs[i]()
	}
}

// removeAll removes dir even where a case (or the sandbox) left entries
// read-only, or where an executable that has just exited is still held
// open for a moment (Windows keeps a program's image mapped until the
// process object is gone, so deleting the probe can fail right after it
// ran).
func removeAll(dir string) {
	if os.RemoveAll(dir) == nil {
		return
	}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	for range 10 {
		if os.RemoveAll(dir) == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// launch starts a new plugin process for this case; it is killed when the
// case ends.
func (h *H) launch(ctx context.Context, mod func(*driverapi.LaunchConfig)) (*driverapi.Process, error) {
	lc := h.suite.launchConfig()
	if mod != nil {
		mod(&lc)
	}
	p, err := driverapi.LaunchDriver(ctx, lc)
	if err != nil {
		return nil, err
	}
	h.defer_(p.Kill)
	return p, nil
}

// probeSession is the session id of every command the suite runs.
const probeSession = "conformance"

// useFresh launches a plugin of the case's own and makes it h.Driver.
func (h *H) useFresh(ctx context.Context) error {
	p, err := h.launch(ctx, nil)
	if err != nil {
		return fmt.Errorf("launching the driver: %w", err)
	}
	h.Driver, h.Proc = p.Driver(), p
	return nil
}

// Cmd is one command for the driver. Zero fields take the suite defaults.
type Cmd struct {
	Program string
	Args    []string
	// Env is the child's complete environment; nil means defaultEnv.
	Env []driverapi.EnvVar
	// NoEnv gives the child an empty environment (Env nil is the default).
	NoEnv bool
	Stdin []byte
	// Cwd: empty means the workspace root.
	Cwd string
	// Caps: nil means baseline plus spawn_subprocess (most scripts fork).
	Caps      *driverapi.Capabilities
	Proxy     *driverapi.ProxyEndpoint
	Timeout   time.Duration // default 20s
	MaxOutput int64         // default driverapi.DefaultMaxOutputBytes
	// OnStdout, when set, also sees stdout as it streams.
	OnStdout func([]byte)
	// Driver overrides h.Driver.
	Driver driverapi.Driver
	// Session overrides the suite's session id; SessionSandbox asks for
	// the session's persistent sandbox (protocol 1.3).
	Session        string
	SessionSandbox bool
	// Layered runs the command over the workspace as an overlay with this
	// layer (protocol 1.4); it needs Session and SessionSandbox.
	Layered *driverapi.LayeredWorkspace
	// probe: Program is the probe, placed in the workspace at Exec.
	probe bool
}

// Out is what a command produced.
type Out struct {
	Stdout, Stderr []byte
	// StdoutSeen, StderrSeen count every byte the driver streamed,
	// including any beyond what the buffers kept.
	StdoutSeen, StderrSeen int64
	Exit                   driverapi.Exit
	Err                    error
	Profile                driverapi.Profile
}

func (o Out) String() string {
	if o.Err != nil {
		return "error: " + o.Err.Error()
	}
	return fmt.Sprintf("exit=%d signal=%d timed_out=%v stdout=%q stderr=%q",
		o.Exit.ExitCode, o.Exit.Signal, o.Exit.TimedOut, clip(o.Stdout), clip(o.Stderr))
}

func clip(b []byte) string {
	if len(b) > 300 {
		return string(b[:300]) + "..."
	}
	return string(b)
}

func defaultCaps() driverapi.Capabilities { return driverapi.Capabilities{SpawnSubprocess: true} }

// defaultEnv is the environment of a command that does not set its own.
func (h *H) defaultEnv() []driverapi.EnvVar {
	return append([]driverapi.EnvVar(nil), h.suite.progs.env...)
}

// envWith is defaultEnv plus more variables.
func (h *H) envWith(more ...driverapi.EnvVar) []driverapi.EnvVar {
	return append(h.defaultEnv(), more...)
}

// sep separates probe steps.
const sep = probe.Sep

// ProbeCmd makes c run the probe with the given steps (see package
// internal/probe): Program is filled in when the command runs, with the
// probe's path in the current workspace.
func (h *H) ProbeCmd(c Cmd, steps ...string) Cmd {
	c.probe = true
	c.Args = append([]string{probe.Magic}, steps...)
	return c
}

// Probe runs the probe with steps under caps (nil: default).
func (h *H) Probe(ctx context.Context, caps *driverapi.Capabilities, steps ...string) Out {
	return h.Exec(ctx, h.ProbeCmd(Cmd{Caps: caps}, steps...))
}

// resolve places the probe for a probe command.
func (h *H) resolve(c Cmd) (Cmd, error) {
	if !c.probe {
		return c, nil
	}
	p, err := h.suite.placeProbe(h.Work)
	if err != nil {
		return c, err
	}
	c.Program = p
	return c, nil
}

// profile asks the driver for the profile of caps in this case's workspace.
func (h *H) profile(ctx context.Context, d driverapi.Driver, caps driverapi.Capabilities, cwd string, proxy *driverapi.ProxyEndpoint) (driverapi.Profile, error) {
	if cwd == "" {
		cwd = h.Work
	}
	return d.ProfileFor(ctx, driverapi.ProfileRequest{Capabilities: caps, Workspace: h.Work, Cwd: cwd, Proxy: proxy})
}

// spec builds the RunSpec of c with the given profile.
func (h *H) spec(c Cmd, p driverapi.Profile) driverapi.RunSpec {
	env := c.Env
	if env == nil && !c.NoEnv {
		env = h.defaultEnv()
	}
	cwd := c.Cwd
	if cwd == "" {
		cwd = h.Work
	}
	timeout := c.Timeout
	if timeout == 0 {
		timeout = 20 * time.Second
	}
	maxOut := c.MaxOutput
	if maxOut == 0 {
		maxOut = driverapi.DefaultMaxOutputBytes
	}
	session := c.Session
	if session == "" {
		session = probeSession
	}
	return driverapi.RunSpec{
		Program: c.Program, Args: c.Args, Env: env, Stdin: c.Stdin, Cwd: cwd,
		Profile: p, Timeout: timeout, MaxOutputBytes: maxOut,
		SessionID: session, CommandID: fmt.Sprintf("c%d", time.Now().UnixNano()),
		SessionSandbox: c.SessionSandbox, Layered: c.Layered,
	}
}

// Exec runs c to the end. Output beyond twice the budget (plus slack) is
// counted but not kept, so a driver that ignores the budget cannot exhaust
// the suite's memory.
func (h *H) Exec(ctx context.Context, c Cmd) Out {
	d := c.Driver
	if d == nil {
		d = h.Driver
	}
	c, err := h.resolve(c)
	if err != nil {
		return Out{Err: fmt.Errorf("setting up the probe: %w", err)}
	}
	caps := defaultCaps()
	if c.Caps != nil {
		caps = *c.Caps
	}
	p, err := h.profile(ctx, d, caps, c.Cwd, c.Proxy)
	if err != nil {
		return Out{Err: fmt.Errorf("ProfileFor: %w", err)}
	}
	return h.run(ctx, d, h.spec(c, p), c.OnStdout)
}

func (h *H) run(ctx context.Context, d driverapi.Driver, spec driverapi.RunSpec, onStdout func([]byte)) Out {
	keep := 2*spec.MaxOutputBytes + 64<<10
	stdout := &capBuffer{limit: keep, on: onStdout}
	stderr := &capBuffer{limit: keep}
	exit, err := d.Run(ctx, spec, driverapi.Streams{Stdout: stdout, Stderr: stderr})
	return Out{
		Stdout: stdout.bytes(), Stderr: stderr.bytes(),
		StdoutSeen: stdout.total(), StderrSeen: stderr.total(),
		Exit: exit, Err: err, Profile: spec.Profile,
	}
}

// Sh runs `/bin/sh -c script` with caps (nil: default). Only cases about
// the shell use it; they are POSIXOnly.
func (h *H) Sh(ctx context.Context, caps *driverapi.Capabilities, script string, args ...string) Out {
	if h.suite.progs.sh == "" {
		return Out{Err: errors.New("this host has no POSIX shell (the case should be POSIXOnly)")}
	}
	return h.Exec(ctx, Cmd{Program: h.suite.progs.sh, Args: append([]string{"-c", script, "sh"}, args...), Caps: caps})
}

// ok returns an error unless o ran and exited 0.
func ok(what string, o Out) error {
	if o.Err != nil {
		return fmt.Errorf("%s: driver error: %w", what, o.Err)
	}
	if o.Exit.ExitCode != 0 || o.Exit.Signal != 0 || o.Exit.TimedOut {
		return fmt.Errorf("%s: expected success, got %s", what, o)
	}
	return nil
}

// ran returns an error unless the command reached the marker line: the
// positive control that the program itself ran in the sandbox.
func ran(what string, o Out, marker string) error {
	if o.Err != nil {
		return fmt.Errorf("%s: driver error: %w", what, o.Err)
	}
	if !bytes.Contains(o.Stdout, []byte(marker)) {
		return fmt.Errorf("%s: the program did not run to %q (positive control): %s", what, marker, o)
	}
	return nil
}

type capBuffer struct {
	mu    sync.Mutex
	buf   bytes.Buffer
	limit int64
	n     int64
	on    func([]byte)
}

func (b *capBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.n += int64(len(p))
	if room := b.limit - int64(b.buf.Len()); room > 0 {
		b.buf.Write(p[:min(int64(len(p)), room)])
	}
	if b.on != nil {
		b.on(p)
	}
	return len(p), nil
}

func (b *capBuffer) bytes() []byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return bytes.Clone(b.buf.Bytes())
}

func (b *capBuffer) total() int64 { b.mu.Lock(); defer b.mu.Unlock(); return b.n }

// writeFile writes a host file, creating parents.
func writeFile(path, content string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return os.WriteFile(path, []byte(content), 0o644)
}

// mustNotExist fails when the sandbox managed to create path on the host.
func mustNotExist(path, what string) error {
	if _, err := os.Lstat(path); err == nil {
		return fmt.Errorf("%s: %s was created on the host", what, path)
	}
	return nil
}

func readHost(path string) string {
	b, _ := os.ReadFile(path)
	return string(b)
}

// shq quotes s for /bin/sh.
func shq(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

// growth watches a marker file a background child appends to, and reports
// whether it still grows after the command ended.
func stillGrowing(ctx context.Context, path string, window time.Duration) (bool, int64) {
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			return 0
		}
		return st.Size()
	}
	// Let anything already in flight land before the baseline.
	sleepCtx(ctx, 150*time.Millisecond)
	before := size()
	sleepCtx(ctx, window)
	after := size()
	return after > before, after
}

func sleepCtx(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// waitFor polls cond every 20ms until it holds or ctx/limit ends.
func waitFor(ctx context.Context, limit time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(limit)
	for {
		if cond() {
			return true
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return false
		}
		sleepCtx(ctx, 20*time.Millisecond)
	}
}

var _ io.Writer = (*capBuffer)(nil)
