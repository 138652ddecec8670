// Package pluginhost launches and keeps the plugin processes the runtime
// uses: the driver (DriverHost) and hook plugins (HookHost), and finds
// driver binaries (FindDriver). The assembly package (alephsandbox) injects
// them into core's pipeline; core launches nothing itself.
package pluginhost

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// DriverHostConfig says which driver binary a DriverHost runs and how.
type DriverHostConfig struct {
	// Path of the driver binary. Required.
	Path string
	// Name labels logs and errors; default: the binary's base name.
	Name string
	// SHA256 pins the binary (hex); empty means unpinned.
	SHA256 string
	// Options is the JSON handed to the plugin as ALEPH_DRIVER_OPTIONS
	// (Config.DriverOptions, the platform section); nil sends "{}". A
	// driver with the config call is also handed it by SetConfig, unless
	// Section routes it another.
	Options []byte
	// Section, when set, gives a section of the configuration by name
	// (Config.DriverSection) and routes the configuration by driver: the
	// platform section in Options belongs to this project's drivers, so a
	// binary of another name (aleph-driver-NAME, DriverName) is launched
	// with [sandbox.drivers.NAME] in ALEPH_DRIVER_OPTIONS instead, and a
	// driver with the config call whose backend is not one of the shipped
	// drivers is asked its ConfigSchema and handed the section it names.
	// A third-party driver never sees another driver's keys, which it
	// would refuse (running nothing) or, worse, half understand.
	Section func(name string) []byte
	// Logger receives the plugin's own log lines, under a logger named
	// after the driver. Never command output.
	Logger hclog.Logger
	// Env is added to the plugin process's environment.
	Env []string
	// StartTimeout bounds the handshake; 0 uses driverapi's default.
	StartTimeout time.Duration
}

// DriverHost is a driverapi.Driver backed by a plugin process. It launches
// the plugin on first use, keeps it across commands, notices when it has
// died (failing the call in flight with a *DriverError naming the driver),
// and launches a fresh one on the next call. Close kills it.
type DriverHost struct {
	cfg    DriverHostConfig
	logger hclog.Logger

	mu     sync.Mutex
	proc   *driverapi.Process
	closed bool
	// launching is the start under way, if any (get).
	launching *launch
	// caps is the fingerprint reported by capsOf, the process it came from.
	caps   *driverapi.HostCapabilities
	capsOf *driverapi.Process
	// launches counts the plugin processes started (for serve's metrics:
	// every one after the first is a relaunch).
	launches int64
	// launchSection is the key of the section routed into
	// ALEPH_DRIVER_OPTIONS ("" for the platform section), configSection
	// the one SetConfig handed the running driver, when it names another.
	launchSection, configSection string
}

var (
	_ driverapi.Driver   = (*DriverHost)(nil)
	_ driverapi.Signaler = (*DriverHost)(nil)
)

// NewDriverHost checks cfg; it does not start the plugin.
func NewDriverHost(cfg DriverHostConfig) (*DriverHost, error) {
	if cfg.Path == "" {
		return nil, errors.New("driver host: no driver path")
	}
	if cfg.Name == "" {
		cfg.Name = strings.TrimSuffix(filepath.Base(cfg.Path), ".exe")
	}
	section := ""
	if cfg.Section != nil {
		if name := core.DriverName(cfg.Path); !core.ShippedBackend(name) {
			cfg.Options, section = cfg.Section(name), core.SectionKey(name)
		}
	}
	if cfg.Options == nil {
		cfg.Options = []byte("{}")
	}
	l := cfg.Logger
	if l == nil {
		l = hclog.NewNullLogger()
	}
	return &DriverHost{cfg: cfg, logger: l.Named(cfg.Name), launchSection: section}, nil
}

// ConfigSection is the key of the configuration section the running driver
// was handed ("sandbox.drivers.runc"), or "" for the platform section
// (Options as given) or when no driver has been configured yet. doctor
// shows it: the keys a user set elsewhere reach no driver.
func (h *DriverHost) ConfigSection() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.configSection != "" {
		return h.configSection
	}
	return h.launchSection
}

// Name is the driver's name (for errors and logs).
func (h *DriverHost) Name() string { return h.cfg.Name }

// Path is the driver binary.
func (h *DriverHost) Path() string { return h.cfg.Path }

// Pid is the running plugin's process id, or 0 when none runs.
func (h *DriverHost) Pid() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.proc == nil || h.proc.Exited() {
		return 0
	}
	return h.proc.Pid()
}

// Start launches the plugin now if it is not running (useful to surface a
// broken driver before the first command).
func (h *DriverHost) Start(ctx context.Context) error {
	_, err := h.get(ctx)
	return err
}

// get returns the running plugin, launching one if none runs. Callers
// that arrive while a launch is under way wait for that launch instead of
// starting their own (a plugin that fails to start is tried once per
// wave of callers, not once per caller), each for as long as its ctx
// allows. The launch itself is not the caller's: it runs under
// StartTimeout alone, so a caller that gives up does not fail the
// others.
func (h *DriverHost) get(ctx context.Context) (*driverapi.Process, error) {
	h.mu.Lock()
	if h.closed {
		h.mu.Unlock()
		return nil, &core.DriverError{Driver: h.cfg.Name, Op: "start", Err: errors.New("driver host is closed")}
	}
	if h.proc != nil && !h.proc.Exited() {
		p := h.proc
		h.mu.Unlock()
		return p, nil
	}
	if h.proc != nil {
		h.logger.Warn("driver process has exited; launching a new one")
		h.proc.Kill()
		h.proc = nil
	}
	l := h.launching
	if l == nil {
		timeout := h.cfg.StartTimeout
		if timeout <= 0 {
			timeout = defaultStartTimeout
		}
		lctx, cancel := context.WithTimeout(context.Background(), timeout)
		l = &launch{done: make(chan struct{}), cancel: cancel, timeout: timeout}
		h.launching = l
		go h.launch(lctx, l)
	}
	l.waiting++
	h.mu.Unlock()
	defer func() {
		h.mu.Lock()
		l.waiting--
		h.mu.Unlock()
	}()
	select {
	case <-l.done:
		return l.p, l.err
	case <-ctx.Done():
		return nil, &core.DriverError{Driver: h.cfg.Name, Op: "start", Err: fmt.Errorf("gave up waiting for the driver to start: %w", ctx.Err())}
	}
}

// defaultStartTimeout bounds a launch without StartTimeout: driverapi's
// own default for the handshake, here for the first calls too.
const defaultStartTimeout = 30 * time.Second

// launch is one start of the plugin, shared by every caller of get that
// arrives while it runs.
type launch struct {
	done    chan struct{} // closed when p or err is set
	cancel  context.CancelFunc
	timeout time.Duration
	p       *driverapi.Process
	err     error
	// waiting counts the callers waiting for it (under the host's mu),
	// which tests observe to know a caller joined.
	waiting int
}

// launch starts the plugin and negotiates with it (configure), both bounded
// by StartTimeout: a driver that completes its handshake and then never
// answers Capabilities must not hang every command.
func (h *DriverHost) launch(ctx context.Context, l *launch) {
	defer l.cancel()
	timeout := l.timeout
	p, err := driverapi.LaunchDriver(ctx, driverapi.LaunchConfig{
		Path:         h.cfg.Path,
		SHA256:       h.cfg.SHA256,
		Logger:       h.logger,
		StartTimeout: timeout,
		Env:          append(append([]string(nil), h.cfg.Env...), "ALEPH_DRIVER_OPTIONS="+string(h.cfg.Options)),
	})
	if err != nil {
		err = &core.DriverError{Driver: h.cfg.Name, Op: "start", Err: err}
	}
	var caps driverapi.HostCapabilities
	if err == nil {
		caps, err = h.configure(ctx, p)
	}
	if err != nil && p != nil {
		// gRPC may report the deadline from its own timer a moment before
		// the context's fires, so either one says the time ran out.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) || errors.Is(err, context.DeadlineExceeded) {
			// context.DeadlineExceeded, not ctx.Err(): when gRPC's timer
			// fired first, ctx.Err() is still nil.
			err = &core.DriverError{Driver: h.cfg.Name, Op: "Capabilities",
				Err: fmt.Errorf("the driver started but did not answer within %s of its start: %w", timeout, context.DeadlineExceeded)}
		}
		p.Kill()
		p = nil
	}
	h.mu.Lock()
	h.launching = nil
	if err == nil && h.closed {
		p.Kill()
		p, err = nil, &core.DriverError{Driver: h.cfg.Name, Op: "start", Err: errors.New("driver host is closed")}
	}
	if err == nil {
		h.proc = p
		h.caps, h.capsOf = &caps, p
		h.launches++
	}
	l.p, l.err = p, err
	h.mu.Unlock()
	close(l.done)
}

// Launches is how many plugin processes this host has started.
func (h *DriverHost) Launches() int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.launches
}

// configure negotiates with a freshly launched driver: it learns the
// protocol minor version and optional calls (Capabilities), and hands a
// driver with the config call its section through SetConfig, where a refused
// key becomes a typed *driverapi.ConfigError. A protocol-1.0 driver only had
// the section in its environment and validated it there.
func (h *DriverHost) configure(ctx context.Context, p *driverapi.Process) (driverapi.HostCapabilities, error) {
	c, err := p.Driver().Capabilities(ctx)
	if err != nil {
		return c, &core.DriverError{Driver: h.cfg.Name, Op: "Capabilities", Err: err}
	}
	if !c.Supports(driverapi.CallConfig) {
		return c, nil
	}
	cf, ok := p.Driver().(driverapi.Configurable)
	if !ok {
		return c, nil
	}
	opts := h.cfg.Options
	if h.cfg.Section != nil && !core.ShippedBackend(c.Backend) {
		sc, err := cf.ConfigSchema(ctx)
		if err != nil {
			return c, &core.DriverError{Driver: h.cfg.Name, Op: "ConfigSchema", Err: err}
		}
		opts = h.cfg.Section(sc.Section)
		h.mu.Lock()
		h.configSection = core.SectionKey(sc.Section)
		h.mu.Unlock()
	}
	if err := cf.SetConfig(ctx, opts); err != nil {
		return c, &core.DriverError{Driver: h.cfg.Name, Op: "configure", Err: err}
	}
	// The report may depend on the section: ask again.
	if c, err = p.Driver().Capabilities(ctx); err != nil {
		return c, &core.DriverError{Driver: h.cfg.Name, Op: "Capabilities", Err: err}
	}
	return c, nil
}

// current is the running driver process (nil for none) and the
// capabilities it reported (nil when none were read from this process: a
// relaunched driver's are read again before they are trusted).
func (h *DriverHost) current() (*driverapi.Process, *driverapi.HostCapabilities) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.capsOf != h.proc {
		return h.proc, nil
	}
	return h.proc, h.caps
}

// Signal delivers sig to a running command (driverapi.Signaler). It never
// launches a driver: with none running, no command runs either.
func (h *DriverHost) Signal(ctx context.Context, commandID string, sig driverapi.Signal) error {
	p, caps := h.current()
	if p == nil || p.Exited() {
		return &driverapi.NotRunningError{CommandID: commandID}
	}
	sg, ok := p.Driver().(driverapi.Signaler)
	if !ok || caps == nil || !caps.Supports(driverapi.CallSignal) {
		return h.unsupported(caps, driverapi.CallSignal)
	}
	if err := sg.Signal(ctx, commandID, sig); err != nil {
		var nr *driverapi.NotRunningError
		if errors.As(err, &nr) {
			return err
		}
		return h.failed(p, "Signal", err)
	}
	return nil
}

// ForgetSession tells the driver that sessionID is forgotten
// (driverapi.SessionForgetter). It never launches a driver: one that is not
// running keeps nothing for any session. A driver without the call keeps
// nothing per session either, and is not asked.
func (h *DriverHost) ForgetSession(ctx context.Context, sessionID string) error {
	p, caps := h.current()
	if p == nil || p.Exited() || caps == nil || !caps.Supports(driverapi.CallForgetSession) {
		return nil
	}
	f, ok := p.Driver().(driverapi.SessionForgetter)
	if !ok {
		return nil
	}
	if err := f.ForgetSession(ctx, sessionID); err != nil {
		return h.failed(p, "ForgetSession", err)
	}
	return nil
}

// LayeredView asks the driver where the session's mounted overlay is
// (driverapi.LayeredViewer). It never launches a driver: one that is not
// running mounts nothing. A driver without the call gives an
// *driverapi.UnsupportedCallError.
func (h *DriverHost) LayeredView(ctx context.Context, sessionID string) (driverapi.LayeredView, error) {
	p, caps := h.current()
	if p == nil || p.Exited() {
		return driverapi.LayeredView{}, nil
	}
	v, ok := p.Driver().(driverapi.LayeredViewer)
	if !ok || caps == nil || !caps.Supports(driverapi.CallLayeredView) {
		return driverapi.LayeredView{}, h.unsupported(caps, driverapi.CallLayeredView)
	}
	lv, err := v.LayeredView(ctx, sessionID)
	if err != nil {
		return driverapi.LayeredView{}, h.failed(p, "LayeredView", err)
	}
	return lv, nil
}

// OpenLayeredView asks the driver to mount a layer's overlay for the host
// (driverapi.LayeredViewOpener), launching the driver if needed: after a
// restart no driver runs, and the view is the driver's to make. The view
// lives until ctx ends. A driver without the call gives an
// *driverapi.UnsupportedCallError.
func (h *DriverHost) OpenLayeredView(ctx context.Context, req driverapi.LayeredViewRequest) (driverapi.LayeredView, error) {
	if _, err := h.Capabilities(ctx); err != nil {
		return driverapi.LayeredView{}, err
	}
	p, caps := h.current()
	if p == nil || p.Exited() {
		return driverapi.LayeredView{}, &core.DriverError{Driver: h.cfg.Name, Op: "OpenLayeredView", Err: errors.New("the driver process has exited")}
	}
	o, ok := p.Driver().(driverapi.LayeredViewOpener)
	if !ok || caps == nil || !caps.Supports(driverapi.CallLayeredViewOpen) {
		return driverapi.LayeredView{}, h.unsupported(caps, driverapi.CallLayeredViewOpen)
	}
	lv, err := o.OpenLayeredView(ctx, req)
	if err != nil {
		return driverapi.LayeredView{}, h.failed(p, "OpenLayeredView", err)
	}
	return lv, nil
}

// ConfigSchema describes the driver's configuration section, launching the
// driver if needed. A driver without the config call gives an
// *driverapi.UnsupportedCallError.
func (h *DriverHost) ConfigSchema(ctx context.Context) (driverapi.ConfigSchema, error) {
	p, err := h.get(ctx)
	if err != nil {
		return driverapi.ConfigSchema{}, err
	}
	h.mu.Lock()
	caps := h.caps
	h.mu.Unlock()
	cf, ok := p.Driver().(driverapi.Configurable)
	if !ok || caps == nil || !caps.Supports(driverapi.CallConfig) {
		return driverapi.ConfigSchema{}, h.unsupported(caps, driverapi.CallConfig)
	}
	sc, err := cf.ConfigSchema(ctx)
	if err != nil {
		return sc, h.failed(p, "ConfigSchema", err)
	}
	return sc, nil
}

// failed turns a call error into a *DriverError and, when the plugin died,
// forgets it so the next call relaunches.
func (h *DriverHost) failed(p *driverapi.Process, op string, err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		if !p.Exited() {
			return err
		}
	}
	dead := errors.Is(err, driverapi.ErrPluginDied) || p.Exited()
	if !dead {
		return &core.DriverError{Driver: h.cfg.Name, Op: op, Err: err}
	}
	h.mu.Lock()
	if h.proc == p {
		h.proc.Kill()
		h.proc = nil
	}
	h.mu.Unlock()
	return &core.DriverError{Driver: h.cfg.Name, Op: op,
		Err: fmt.Errorf("driver process died during the call (it will be relaunched for the next command): %w", p.DiedError())}
}

// Capabilities reports the driver's fingerprint (fetched once per process).
func (h *DriverHost) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	p, err := h.get(ctx)
	if err != nil {
		return driverapi.HostCapabilities{}, err
	}
	h.mu.Lock()
	if h.caps != nil && h.capsOf == p {
		c := *h.caps
		h.mu.Unlock()
		return c, nil
	}
	h.mu.Unlock()
	c, err := p.Driver().Capabilities(ctx)
	if err != nil {
		return c, h.failed(p, "Capabilities", err)
	}
	h.mu.Lock()
	h.caps, h.capsOf = &c, p
	h.mu.Unlock()
	return c, nil
}

// ProfileFor asks the plugin for a profile.
func (h *DriverHost) ProfileFor(ctx context.Context, req driverapi.ProfileRequest) (driverapi.Profile, error) {
	p, err := h.get(ctx)
	if err != nil {
		return driverapi.Profile{}, err
	}
	prof, err := p.Driver().ProfileFor(ctx, req)
	if err != nil {
		return prof, h.failed(p, "ProfileFor", err)
	}
	return prof, nil
}

// Run runs spec in the plugin.
func (h *DriverHost) Run(ctx context.Context, spec driverapi.RunSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	p, err := h.get(ctx)
	if err != nil {
		return driverapi.Exit{}, err
	}
	exit, err := p.Driver().Run(ctx, spec, streams)
	if err != nil {
		return exit, h.failed(p, "Run", err)
	}
	return exit, nil
}

// Close kills the plugin process and waits for it. Later calls fail.
func (h *DriverHost) Close() error {
	h.mu.Lock()
	h.closed = true
	if h.proc != nil {
		h.proc.Kill()
		h.proc = nil
	}
	l := h.launching
	h.mu.Unlock()
	if l != nil {
		// A start under way is cut short (its plugin killed) and waited
		// for, so no plugin process outlives Close.
		l.cancel()
		<-l.done
	}
	return nil
}

// DefaultDriverName is the platform's default driver: bwrap on Linux,
// seatbelt on macOS, appcontainer on Windows ("" elsewhere).
func DefaultDriverName() string {
	switch runtime.GOOS {
	case "linux":
		return "bwrap"
	case "darwin":
		return "seatbelt"
	case "windows":
		return "appcontainer"
	}
	return ""
}

// DriverBinaryName is the file name of driver name: aleph-driver-NAME
// (with .exe on Windows).
func DriverBinaryName(name string) string {
	b := "aleph-driver-" + name
	if runtime.GOOS == "windows" {
		b += ".exe"
	}
	return b
}

// FindDriver resolves a driver name or path to a binary. A name containing
// a path separator is a path. Otherwise ("" meaning DefaultDriverName) the
// binary DriverBinaryName(name) is looked for in searchDirs (e.g. the
// config's driver directory), the directory of the running executable,
// $ALEPH_SANDBOX_PLUGIN_DIR, then each $PATH entry. looked lists every
// candidate path tried, in order.
func FindDriver(name string, searchDirs []string) (path string, looked []string, err error) {
	if strings.ContainsRune(name, '/') || (runtime.GOOS == "windows" && strings.ContainsRune(name, '\\')) {
		abs, aerr := filepath.Abs(name)
		if aerr != nil {
			abs = name
		}
		looked = []string{abs}
		// A file the user named exists: the launch says what is wrong
		// with it (not executable, not a plugin), "not found" would not.
		if _, err := os.Stat(abs); err == nil {
			return abs, looked, nil
		}
		return "", looked, &core.DriverNotFoundError{Name: name, Binary: filepath.Base(name), Looked: looked}
	}
	if name == "" {
		name = DefaultDriverName()
		if name == "" {
			return "", nil, &core.DriverNotFoundError{Name: "(default)", Binary: "aleph-driver-*", Looked: nil}
		}
	}
	if strings.ContainsAny(name, "\x00") || name == "." || name == ".." {
		return "", nil, &core.DriverNotFoundError{Name: name, Binary: DriverBinaryName(name)}
	}
	bin := DriverBinaryName(name)
	seen := map[string]bool{}
	for _, d := range DriverSearchDirs(searchDirs) {
		cand := filepath.Join(d, bin)
		if seen[cand] {
			continue
		}
		seen[cand] = true
		looked = append(looked, cand)
		if isExecutableFile(cand) {
			return cand, looked, nil
		}
	}
	return "", looked, &core.DriverNotFoundError{Name: name, Binary: bin, Looked: looked}
}

// DriverSearchDirs is the driver lookup path: searchDirs, the directory of
// the running executable, $ALEPH_SANDBOX_PLUGIN_DIR, then $PATH. Relative
// entries are dropped: they would search the current directory.
func DriverSearchDirs(searchDirs []string) []string {
	dirs := append([]string(nil), searchDirs...)
	if exe, err := os.Executable(); err == nil {
		dirs = append(dirs, filepath.Dir(exe))
	}
	if d := os.Getenv("ALEPH_SANDBOX_PLUGIN_DIR"); d != "" {
		dirs = append(dirs, d)
	}
	dirs = append(dirs, filepath.SplitList(os.Getenv("PATH"))...)
	out := dirs[:0]
	seen := map[string]bool{}
	for _, d := range dirs {
		if d == "" || !filepath.IsAbs(d) || seen[d] {
			continue
		}
		seen[d] = true
		out = append(out, d)
	}
	return out
}

// DriverCandidate is a driver binary found on the lookup path.
type DriverCandidate struct {
	Name string // "bwrap" for aleph-driver-bwrap
	Path string
}

// FindDrivers lists the driver binaries on the lookup path (see
// DriverSearchDirs), the first of each name, sorted by name.
func FindDrivers(searchDirs []string) []DriverCandidate {
	found := map[string]string{}
	for _, d := range DriverSearchDirs(searchDirs) {
		entries, err := os.ReadDir(d)
		if err != nil {
			continue
		}
		for _, e := range entries {
			n := e.Name()
			if runtime.GOOS == "windows" {
				if !strings.HasSuffix(strings.ToLower(n), ".exe") {
					continue
				}
				n = n[:len(n)-4]
			}
			name, ok := strings.CutPrefix(n, "aleph-driver-")
			if !ok || name == "" || found[name] != "" {
				continue
			}
			if p := filepath.Join(d, e.Name()); isExecutableFile(p) {
				found[name] = p
			}
		}
	}
	out := make([]DriverCandidate, 0, len(found))
	for n, p := range found {
		out = append(out, DriverCandidate{Name: n, Path: p})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}

func isExecutableFile(p string) bool {
	st, err := os.Stat(p)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	return runtime.GOOS == "windows" || st.Mode().Perm()&0o111 != 0
}

// RunStream runs spec in the plugin with streamed stdin
// (driverapi.StreamRunner). A driver without the run_stream call gives an
// *driverapi.UnsupportedCallError.
func (h *DriverHost) RunStream(ctx context.Context, spec driverapi.RunSpec, in driverapi.StreamInput, streams driverapi.Streams) (driverapi.Exit, error) {
	p, err := h.get(ctx)
	if err != nil {
		return driverapi.Exit{}, err
	}
	h.mu.Lock()
	caps := h.caps
	if h.capsOf != p {
		caps = nil
	}
	h.mu.Unlock()
	sr, ok := p.Driver().(driverapi.StreamRunner)
	if !ok || caps == nil || !caps.Supports(driverapi.CallRunStream) {
		return driverapi.Exit{}, h.unsupported(caps, driverapi.CallRunStream)
	}
	exit, err := sr.RunStream(ctx, spec, in, streams)
	if err != nil {
		return exit, h.failed(p, "RunStream", err)
	}
	return exit, nil
}

var _ driverapi.StreamRunner = (*DriverHost)(nil)

// unsupported is the error for a call the driver does not implement, with
// the protocol version it reported (caps is nil before it reported one).
func (h *DriverHost) unsupported(caps *driverapi.HostCapabilities, call string) *driverapi.UnsupportedCallError {
	if caps == nil {
		return &driverapi.UnsupportedCallError{Plugin: h.cfg.Name, Call: call}
	}
	return caps.UnsupportedCall(h.cfg.Name, call, "")
}
