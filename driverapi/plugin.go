package driverapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc"

	pb "github.com/aleph-sandbox/aleph-sandbox/driverapi/proto/alephv1"
)

// Plugin names in the go-plugin plugin set.
const (
	PluginDriver = "driver"
	PluginHook   = "hook"
)

// Handshake is shared by every aleph-sandbox plugin. The magic cookie only
// stops a plugin binary being run by hand by mistake; it is not a security
// boundary. ProtocolVersion is the contract's major version.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  ProtocolVersion,
	MagicCookieKey:   "ALEPH_SANDBOX_PLUGIN",
	MagicCookieValue: "7c1f0b64-driver-api-aleph-sandbox",
}

// DriverPlugin is the go-plugin glue for a Driver.
type DriverPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Driver
	// Name labels errors on the client side.
	Name string
}

// GRPCServer registers the driver service.
func (p *DriverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterOsSandboxDriverServer(s, &driverServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a Driver backed by the connection.
func (p *DriverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return NewDriverClient(c, p.Name), nil
}

// HookPlugin is the go-plugin glue for a Hook.
type HookPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Hook
	Name string
}

// GRPCServer registers the hook service.
func (p *HookPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterSandboxHookServer(s, &hookServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a Hook backed by the connection.
func (p *HookPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return NewHookClient(c, p.Name), nil
}

func pluginLogger(name string) hclog.Logger {
	// Plugins never write to stdout (it carries the go-plugin handshake);
	// JSON on stderr is parsed and re-logged by the host.
	return hclog.New(&hclog.LoggerOptions{Name: name, Output: os.Stderr, JSONFormat: true, Level: hclog.Info})
}

// Preparer is an optional interface of a Driver with slow one-time work
// (probing the host) that can start as soon as the plugin process does:
// Serve calls Prepare in the background before the handshake, so the work
// overlaps the host's side of it instead of delaying the first command.
// Prepare must be safe to run concurrently with every other method.
type Preparer interface{ Prepare() }

// Closer is optional for a Driver that Serve runs: Close is called once the
// host has shut the plugin down (its graceful stop), before the process
// exits, to release what the driver keeps between commands (sandboxes built
// ahead, their cgroups). The contexts of runs still in flight are cancelled
// by then, but nothing waits for their calls to return: Close should wait
// for them, so that no command outlives the plugin (the bwrap driver's
// does, bounded). A plugin that dies otherwise never gets there: what it
// kept must also end on its own (as the bwrap driver's do, with their
// lifeline) and be swept by the next start.
type Closer interface{ Close() }

// Serve runs d as a plugin process. It is the whole main of a driver binary
// and returns once the host has shut the plugin down.
func Serve(d Driver) {
	serve(plugin.PluginSet{PluginDriver: &DriverPlugin{Impl: d}}, func() {
		if p, ok := d.(Preparer); ok {
			go p.Prepare()
		}
	})
	if c, ok := d.(Closer); ok {
		c.Close()
	}
}

// ServeHook runs h as a hook plugin process; it does not return.
func ServeHook(h Hook) {
	serve(plugin.PluginSet{PluginHook: &HookPlugin{Impl: h}}, func() {})
}

// serve takes over the TLS material first (its descriptor must be closed
// before anything can start a process that would inherit it), then starts
// the driver's preparation and serves.
func serve(ps plugin.PluginSet, start func()) {
	tlsConfig, err := pluginTLS()
	if err != nil {
		fmt.Fprintln(os.Stderr, "plugin: mutual TLS:", err)
		os.Exit(1)
	}
	if err := watchLifeline(); err != nil {
		fmt.Fprintln(os.Stderr, "plugin: lifeline:", err)
		os.Exit(1)
	}
	markInheritedCloseOnExec()
	sc := &plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         ps,
		GRPCServer:      plugin.DefaultGRPCServer,
		Logger:          pluginLogger("plugin"),
	}
	if tlsConfig != nil {
		sc.TLSProvider = func() (*tls.Config, error) { return tlsConfig, nil }
	}
	// Run by hand (no cookie) go-plugin only explains and exits: nothing
	// to prepare for.
	if os.Getenv(Handshake.MagicCookieKey) == Handshake.MagicCookieValue {
		start()
	}
	plugin.Serve(sc)
}

// LaunchConfig says how to start a plugin binary.
type LaunchConfig struct {
	// Path of the plugin binary. Required.
	Path string
	// SHA256, when set, pins the binary: lower-case or upper-case hex of its
	// SHA-256. A binary that does not match is never executed.
	SHA256 string
	// Logger receives the plugin's own log lines (its stderr). Never the
	// command's output. Defaults to a null logger.
	Logger hclog.Logger
	// StartTimeout bounds the handshake. Default 30s.
	StartTimeout time.Duration
	// Env is added to the plugin's environment (the host's environment is
	// inherited as go-plugin does; the plugin itself must not pass it on).
	Env []string
	// Args are extra arguments for the plugin binary.
	Args []string
	// HostProtocolVersion overrides the version this host offers; tests
	// use it to provoke a mismatch. Zero means ProtocolVersion.
	HostProtocolVersion int
}

// Process is a launched plugin: one OS process and the client that talks to it.
type Process struct {
	client *plugin.Client
	raw    interface{}
	path   string
	// handover holds the host's end of the plugin's lifeline pipe (the
	// plugin exits when it reads EOF: at Kill, or when the host dies
	// however it dies) and the plugin's private socket directory.
	handover *handover
	// endLife kills the process through os/exec (launch).
	endLife context.CancelFunc
}

// Driver returns the Driver served by the process, or nil if it serves a hook.
func (p *Process) Driver() Driver { d, _ := p.raw.(Driver); return d }

// Hook returns the Hook served by the process, or nil if it serves a driver.
func (p *Process) Hook() AfterHook { h, _ := p.raw.(AfterHook); return h }

// Exited reports whether the plugin process has ended.
func (p *Process) Exited() bool { return p.client.Exited() }

// Path is the binary the process was started from.
func (p *Process) Path() string { return p.path }

// Kill ends the plugin process (gracefully, then forcibly) and waits for it.
func (p *Process) Kill() {
	p.client.Kill()
	if p.endLife != nil {
		p.endLife()
	}
	p.handover.cleanup()
}

// Pid is the plugin's process id, or 0 when unknown.
func (p *Process) Pid() int {
	if rc := p.client.ReattachConfig(); rc != nil {
		return rc.Pid
	}
	return 0
}

// LaunchDriver starts a driver plugin binary and returns its Driver.
func LaunchDriver(ctx context.Context, cfg LaunchConfig) (*Process, error) {
	return launch(ctx, cfg, PluginDriver)
}

// LaunchHook starts a hook plugin binary and returns its Hook.
func LaunchHook(ctx context.Context, cfg LaunchConfig) (*Process, error) {
	return launch(ctx, cfg, PluginHook)
}

var mismatchRE = regexp.MustCompile(`Plugin version: (\d+)`)

func launch(ctx context.Context, cfg LaunchConfig, kind string) (*Process, error) {
	if cfg.Path == "" {
		return nil, &PluginError{Plugin: "(none)", Op: "find", Err: errors.New("no plugin path given")}
	}
	st, err := os.Stat(cfg.Path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, &PluginError{Plugin: cfg.Path, Op: "find", Err: errors.New("no such file")}
	case err != nil:
		return nil, &PluginError{Plugin: cfg.Path, Op: "find", Err: err}
	case !st.Mode().IsRegular():
		return nil, &PluginError{Plugin: cfg.Path, Op: "find", Err: errors.New("not a regular file")}
	case st.Mode().Perm()&0o111 == 0 && !strings.HasSuffix(strings.ToLower(cfg.Path), ".exe"):
		return nil, &PluginError{Plugin: cfg.Path, Op: "find", Err: errors.New("not executable")}
	}
	logger := cfg.Logger
	if logger == nil {
		logger = hclog.NewNullLogger()
	}
	hostVer := cfg.HostProtocolVersion
	if hostVer == 0 {
		hostVer = ProtocolVersion
	}
	hs := Handshake
	hs.ProtocolVersion = uint(hostVer)
	var ps plugin.PluginSet
	if kind == PluginDriver {
		ps = plugin.PluginSet{PluginDriver: &DriverPlugin{Name: cfg.Path}}
	} else {
		ps = plugin.PluginSet{PluginHook: &HookPlugin{Name: cfg.Path}}
	}
	// life ends the process from outside go-plugin: its Kill waits for the
	// lock its Start holds until the handshake or StartTimeout, so a
	// cancelled start could not stop a plugin that never handshakes.
	// Cancelling life kills it (os/exec), and Start returns at once.
	life, endLife := context.WithCancel(context.Background())
	cmd := exec.CommandContext(life, cfg.Path, cfg.Args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	stderrTail := &tailWriter{max: 4096}
	// Mutual TLS with per-launch ephemeral certificates, and a lifeline
	// pipe so the plugin cannot outlive this process (see handover.go).
	ho, err := newHandover(cmd)
	if err != nil {
		endLife()
		return nil, &PluginError{Plugin: cfg.Path, Op: "start", Err: err}
	}
	// The plugin has its copies once started (or never will): close ours.
	defer ho.closeChildEnds()
	launched := false
	defer func() {
		if !launched {
			endLife()
			ho.cleanup()
		}
	}()
	pc := &plugin.ClientConfig{
		HandshakeConfig:  hs,
		Plugins:          ps,
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		TLSConfig:        ho.tlsConfig,
		AutoMTLS:         ho.tlsConfig == nil,
		// go-plugin would append the host's environment after cmd.Env,
		// letting a stray host variable override cfg.Env (driver options,
		// the TLS and lifeline descriptors). cmd.Env already starts with
		// the host's environment, in the right order.
		SkipHostEnv:  true,
		Logger:       logger,
		StartTimeout: cfg.StartTimeout,
		// The plugin's stdout/stderr after the handshake go to the logger
		// (go-plugin's defaults), never into a command's output. The tail
		// of stderr is kept to explain a plugin that fails to start.
		Stderr: stderrTail,
	}
	if cfg.StartTimeout == 0 {
		pc.StartTimeout = 30 * time.Second
	}
	if cfg.SHA256 != "" {
		sum, err := hex.DecodeString(strings.TrimSpace(cfg.SHA256))
		if err != nil || len(sum) != sha256.Size {
			return nil, &PluginError{Plugin: cfg.Path, Op: "checksum", Err: fmt.Errorf("pinned sha256 %q is not 64 hex digits", cfg.SHA256)}
		}
		pc.SecureConfig = &plugin.SecureConfig{Checksum: sum, Hash: sha256.New()}
	}
	client := plugin.NewClient(pc)
	proc, err := startClient(ctx, client, kind, endLife)
	if err != nil {
		client.Kill()
		switch {
		case errors.Is(err, plugin.ErrChecksumsDoNotMatch):
			return nil, &PluginError{Plugin: cfg.Path, Op: "checksum", Err: errors.New("binary does not match the pinned sha256; refusing to run it")}
		case strings.Contains(err.Error(), "incompatible API version"):
			pv := -1
			if m := mismatchRE.FindStringSubmatch(err.Error()); m != nil {
				pv, _ = strconv.Atoi(m[1])
			}
			return nil, &ProtocolMismatchError{Plugin: cfg.Path, PluginVer: pv, HostVer: hostVer, Underlying: err}
		}
		if line := stderrTail.lastLine(); line != "" {
			// A plugin that refuses to run says why on stderr (a
			// driver built for another OS, bad options); go-plugin's
			// own error only says the handshake failed.
			if msg := err.Error(); strings.Contains(msg, "Unrecognized remote plugin message") || strings.Contains(msg, "exited before we could connect") {
				// go-plugin's guesses (wrong architecture, missing
				// libraries...) only hide the plugin's own words.
				err = fmt.Errorf("exited without a handshake; it wrote: %s", line)
			} else {
				err = fmt.Errorf("%w; the plugin wrote: %s", err, line)
			}
		}
		return nil, &PluginError{Plugin: cfg.Path, Op: "start", Err: err}
	}
	proc.path = cfg.Path
	proc.handover = ho
	proc.endLife = endLife
	launched = true
	return proc, nil
}

func startClient(ctx context.Context, client *plugin.Client, kind string, endLife context.CancelFunc) (*Process, error) {
	type result struct {
		raw interface{}
		err error
	}
	done := make(chan result, 1)
	go func() {
		rpc, err := client.Client()
		if err != nil {
			done <- result{err: err}
			return
		}
		raw, err := rpc.Dispense(kind)
		done <- result{raw: raw, err: err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, r.err
		}
		return &Process{client: client, raw: r.raw}, nil
	case <-ctx.Done():
		endLife()
		client.Kill()
		<-done
		return nil, ctx.Err()
	}
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func (w *tailWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf = append(w.buf, p...)
	if over := len(w.buf) - w.max; over > 0 {
		w.buf = append(w.buf[:0], w.buf[over:]...)
	}
	return len(p), nil
}

// lastLine is the last non-empty line written, trimmed and bounded.
func (w *tailWriter) lastLine() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	lines := strings.Split(strings.TrimSpace(string(bytes.ToValidUTF8(w.buf, []byte("?")))), "\n")
	line := strings.TrimSpace(lines[len(lines)-1])
	if len(line) > 300 {
		line = line[:300] + "..."
	}
	return line
}
