package driverapi

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode"
	"unicode/utf8"

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
	// died builds the error of a call whose plugin died (set by launch).
	died func(transport string) error
}

// GRPCServer registers the driver service.
func (p *DriverPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterOsSandboxDriverServer(s, &driverServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a Driver backed by the connection.
func (p *DriverPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &driverClient{c: pb.NewOsSandboxDriverClient(c), name: p.Name, died: p.died}, nil
}

// HookPlugin is the go-plugin glue for a Hook.
type HookPlugin struct {
	plugin.NetRPCUnsupportedPlugin
	Impl Hook
	Name string
	died func(transport string) error
}

// GRPCServer registers the hook service.
func (p *HookPlugin) GRPCServer(_ *plugin.GRPCBroker, s *grpc.Server) error {
	pb.RegisterSandboxHookServer(s, &hookServer{impl: p.Impl})
	return nil
}

// GRPCClient returns a Hook backed by the connection.
func (p *HookPlugin) GRPCClient(_ context.Context, _ *plugin.GRPCBroker, c *grpc.ClientConn) (interface{}, error) {
	return &hookClient{c: pb.NewSandboxHookClient(c), name: p.Name, died: p.died}, nil
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
	tlsConfig, key, err := pluginTLS()
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
	if takeKeyedTransport(key) {
		// No TLS: every connection proves this launch's key first and
		// comes from this uid (transport.go says why that is enough on a
		// private unix socket). Without the host's certificate in the
		// environment go-plugin does not start AutoMTLS either.
		os.Unsetenv(clientCertEnv)
		creds := &pluginKeyCreds{key: key}
		sc.GRPCServer = func(opts []grpc.ServerOption) *grpc.Server {
			return grpc.NewServer(append(opts, grpc.Creds(creds))...)
		}
	} else if tlsConfig != nil {
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
	// MutualTLS keeps mutual TLS on the plugin connection even where the
	// keyed unix transport would be offered (see transport.go for when it
	// is, and why it is enough there).
	MutualTLS bool
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
	// stderr is what is kept of the plugin's stderr (bounded).
	stderr *stderrLog
	// transport holds the transport of the connection once it is made
	// (TransportUnixKey); unset means mutual TLS.
	transport *atomic.Value
}

// Transport is how the host's connection to the plugin is secured:
// TransportUnixKey (a private unix socket, the peer's uid checked and a
// per-launch key proven both ways) or TransportMutualTLS.
func (p *Process) Transport() string {
	if p.transport != nil {
		if v, ok := p.transport.Load().(string); ok {
			return v
		}
	}
	return TransportMutualTLS
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

// DiedError is the error for a call whose plugin process died: a
// *PluginDiedError (errors.Is ErrPluginDied) carrying the plugin's last
// words on stderr, such as the line of a Go panic, which otherwise reach
// only the log. It waits a few seconds at most for the process to end, so
// that everything it wrote has been read.
func (p *Process) DiedError() error {
	return diedError(p.client, p.stderr, "")
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

// go-plugin's error when the first line on the plugin's stdout is not a
// handshake, and its note when there was no line at all.
const (
	goPluginUnrecognized = "Unrecognized remote plugin message: "
	goPluginNoStdout     = "Failed to read any lines from plugin's stdout"
)

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
		return nil, &PluginError{Plugin: cfg.Path, Op: "find", Err: fmt.Errorf("not executable (chmod +x %s)", cfg.Path)}
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
	// What the plugin writes on stderr explains its end: at start, and when
	// it dies during a call (died, below, hands it to the call's error).
	stderr := &stderrLog{}
	var client *plugin.Client // set before any call can fail
	died := func(transport string) error { return diedError(client, stderr, transport) }
	var ps plugin.PluginSet
	if kind == PluginDriver {
		ps = plugin.PluginSet{PluginDriver: &DriverPlugin{Name: cfg.Path, died: died}}
	} else {
		ps = plugin.PluginSet{PluginHook: &HookPlugin{Name: cfg.Path, died: died}}
	}
	// life ends the process from outside go-plugin: its Kill waits for the
	// lock its Start holds until the handshake or StartTimeout, so a
	// cancelled start could not stop a plugin that never handshakes.
	// Cancelling life kills it (os/exec), and Start returns at once.
	life, endLife := context.WithCancel(context.Background())
	cmd := exec.CommandContext(life, cfg.Path, cfg.Args...)
	cmd.Env = append(os.Environ(), cfg.Env...)
	// Mutual TLS with per-launch ephemeral certificates, and a lifeline
	// pipe so the plugin cannot outlive this process (see handover.go).
	ho, err := newHandover(cmd, cfg.MutualTLS)
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
		// The plugin's stderr goes to the logger (go-plugin's default),
		// never into a command's output. What is kept of it explains a
		// plugin that fails to start or dies.
		Stderr:     stderr,
		SyncStderr: &syncStderr{log: stderr, logger: logger.Named(filepath.Base(cfg.Path))},
	}
	if cfg.StartTimeout == 0 {
		pc.StartTimeout = 30 * time.Second
	}
	transport := &atomic.Value{}
	if ho.key != nil {
		// Dial options go after go-plugin's own, so these credentials
		// replace its TLS ones: they run the key handshake if the plugin
		// took the offer, and the same mutual TLS otherwise (an older
		// plugin, or one that could not keep its side).
		pc.GRPCDialOptions = []grpc.DialOption{grpc.WithTransportCredentials(
			&hostCreds{tlsConfig: ho.tlsConfig, key: ho.key, keyDir: ho.keyDir, used: transport})}
	}
	var pinned []byte
	if cfg.SHA256 != "" {
		pinned, err = hex.DecodeString(strings.TrimSpace(cfg.SHA256))
		if err != nil || len(pinned) != sha256.Size {
			return nil, &PluginError{Plugin: cfg.Path, Op: "checksum", Err: fmt.Errorf("pinned sha256 %q is not 64 hex digits", cfg.SHA256)}
		}
		pc.SecureConfig = &plugin.SecureConfig{Checksum: pinned, Hash: sha256.New()}
	}
	client = plugin.NewClient(pc)
	proc, err := startClient(ctx, client, kind, endLife)
	if err != nil {
		client.Kill() // waits for the process, and for its stderr to be read
		switch {
		case errors.Is(err, plugin.ErrChecksumsDoNotMatch):
			return nil, &PluginError{Plugin: cfg.Path, Op: "checksum", Err: checksumError(cfg.Path, pinned)}
		case strings.Contains(err.Error(), "incompatible API version"):
			pv := -1
			if m := mismatchRE.FindStringSubmatch(err.Error()); m != nil {
				pv, _ = strconv.Atoi(m[1])
			}
			return nil, &ProtocolMismatchError{Plugin: cfg.Path, PluginVer: pv, HostVer: hostVer, Underlying: err}
		}
		return nil, &PluginError{Plugin: cfg.Path, Op: "start", Err: startError(err, kind, stderr)}
	}
	proc.path = cfg.Path
	proc.handover = ho
	proc.endLife = endLife
	proc.stderr = stderr
	proc.transport = transport
	launched = true
	return proc, nil
}

// startError explains a plugin that did not complete its handshake in its
// own words, instead of go-plugin's: those guess at a wrong architecture,
// missing libraries or permissions, and quote only the first line the
// plugin wrote to stdout.
func startError(err error, kind string, stderr *stderrLog) error {
	msg := err.Error()
	he := &HandshakeError{kind: kind, LastWords: stderr.lastWords(), Err: err}
	switch {
	case stderr.sawCookieNotice():
		he.ForeignPlugin = true
	case strings.HasPrefix(msg, goPluginUnrecognized):
		rest := msg[len(goPluginUnrecognized):]
		line, _, _ := strings.Cut(rest, "\n")
		if line != "" || !strings.Contains(rest, goPluginNoStdout) {
			he.WroteStdout, he.Stdout = true, bound(cleanLine([]byte(line)))
		}
	case strings.Contains(msg, "exited before we could connect"):
	default:
		// A timeout, a cancelled start, a refused connection: go-plugin's
		// words are right, the plugin's are added.
		if he.LastWords != "" {
			return fmt.Errorf("%w; the plugin wrote: %s", err, he.LastWords)
		}
		return err
	}
	return he
}

// checksumError names both hashes: the pin is configuration, and the
// binary's hash is of a file the user controls, so neither is a secret, and
// the user needs both to tell a stale pin from a replaced binary.
func checksumError(path string, pinned []byte) error {
	e := &ChecksumError{Pinned: hex.EncodeToString(pinned)}
	f, err := os.Open(path)
	if err == nil {
		h := sha256.New()
		if _, err = io.Copy(h, f); err == nil {
			e.Actual = hex.EncodeToString(h.Sum(nil))
		}
		f.Close()
	}
	if err != nil {
		e.ReadErr = err
	}
	return e
}

// diedError is the error for a call whose plugin process died: it waits,
// boundedly, for the process to end and its stderr to be read to the end
// (go-plugin marks it exited only then), so that a panic's last words,
// written just before the connection broke, are in it.
func diedError(client *plugin.Client, stderr *stderrLog, transport string) error {
	if client != nil {
		deadline := time.Now().Add(diedWait)
		for !client.Exited() && time.Now().Before(deadline) {
			time.Sleep(5 * time.Millisecond)
		}
	}
	return &PluginDiedError{LastWords: stderr.lastWords(), Transport: transport}
}

// diedWait bounds how long a failed call waits for its dead plugin's last
// words. A process whose connection broke is normally gone at once; one
// that is not yet is killed by the host afterwards anyway.
const diedWait = 3 * time.Second

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

// Bounds of what is kept of a plugin's stderr (its own log, never a
// command's output: that travels over gRPC). A plugin writes as much as it
// likes; the host keeps this much.
const (
	stderrLineMax = 512 // bytes kept of one line; the rest is dropped
	lastWordsMax  = 300 // bytes of one line shown in an error
)

// goPluginCookieNotice is the first line go-plugin's Serve prints, on
// stderr, when the magic cookie it expects is missing from its environment:
// the binary is a go-plugin plugin, but of another program.
const goPluginCookieNotice = "This binary is a plugin. These are not meant to be executed directly."

// stderrLog is what the host keeps of a launched plugin's stderr, to
// explain its end in the plugin's own words: its last non-empty line, and
// the line (and first frame) of a Go panic or fatal error, which the stack
// trace after it would push out of any tail. Memory is bounded whatever the
// plugin writes: a few lines of at most stderrLineMax bytes.
type stderrLog struct {
	mu      sync.Mutex
	partial []byte // the line being written, at most stderrLineMax bytes
	last    string // the last complete non-empty line

	// A Go panic: its "panic: ..." or "fatal error: ..." line, then the
	// function and file of the first frame that is not the runtime's.
	panicLine, frameFunc, frame string
	panicState                  int
	cookieNotice                bool
}

// goSignalRE matches the first line of the Go runtime's report of a fatal
// signal outside Go code ("SIGSEGV: segmentation violation").
var goSignalRE = regexp.MustCompile(`^SIG[A-Z]+: `)

// Where stderrLog is in a Go stack trace after the panic line.
const (
	traceNone     = iota
	tracePanicked // saw the panic line; waiting for "goroutine N [...]:"
	traceFunc     // waiting for a frame's function line
	traceSkipFile // skipping the file line of a runtime frame
	traceFile     // waiting for the file line of the first real frame
	traceDone
)

// Write takes the plugin process's stderr (go-plugin's ClientConfig.Stderr).
func (w *stderrLog) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	splitLines(&w.partial, p, w.commit)
	return len(p), nil
}

// splitLines appends p to the line in *partial (kept to stderrLineMax
// bytes, the rest dropped) and hands each completed line to commit.
func splitLines(partial *[]byte, p []byte, commit func(string)) {
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\n')
		chunk := p
		if i >= 0 {
			chunk = p[:i]
		}
		if room := stderrLineMax - len(*partial); room > 0 {
			*partial = append(*partial, chunk[:min(room, len(chunk))]...)
		}
		if i < 0 {
			return
		}
		commit(cleanLine(*partial))
		*partial = (*partial)[:0]
		p = p[i+1:]
	}
}

// syncStderr takes what a Go plugin writes to os.Stderr once it serves:
// go-plugin's Serve points os.Stderr at a pipe it carries over the
// connection (ClientConfig.SyncStderr), not at the process's stderr, which
// Serve's logger, the log package and the runtime's panics still use.
// Those lines go to the host's log (go-plugin drops them by default) and
// count as the plugin's last words. They travel the connection, so the
// last ones before a sudden exit may be lost: what must explain a death
// belongs on the process's stderr (log.Fatal, Serve's logger).
type syncStderr struct {
	log     *stderrLog
	logger  hclog.Logger
	mu      sync.Mutex
	partial []byte
}

func (w *syncStderr) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	splitLines(&w.partial, p, func(line string) {
		w.logger.Debug(line)
		w.log.mu.Lock()
		w.log.commit(line)
		w.log.mu.Unlock()
	})
	return len(p), nil
}

// cleanLine makes a line of the plugin's safe to show on a terminal:
// valid UTF-8, control characters (escape sequences) replaced by '?'.
func cleanLine(b []byte) string {
	s := strings.ToValidUTF8(string(b), "?")
	return strings.TrimRightFunc(strings.Map(func(r rune) rune {
		if r == '\t' {
			return r
		}
		if r < 0x20 || r == 0x7f || (r >= 0x80 && r < 0xa0) {
			return '?'
		}
		return r
	}, s), unicode.IsSpace)
}

func (w *stderrLog) commit(line string) {
	w.followTrace(line)
	if strings.Contains(line, goPluginCookieNotice) {
		w.cookieNotice = true
	}
	if strings.TrimSpace(line) != "" {
		w.last = line
	}
}

// followTrace picks out of a Go stack trace the panic line and the first
// frame that is the program's own (runtime frames, such as a re-panic's,
// are skipped).
func (w *stderrLog) followTrace(line string) {
	if strings.TrimSpace(line) == "" {
		return
	}
	if w.panicState != traceNone && strings.HasPrefix(line, "{") {
		// A log line after a trace: the plugin recovered and went on (a
		// trace is never JSON), so the trace is not how it ended.
		w.panicLine, w.frameFunc, w.frame, w.panicState = "", "", "", traceNone
	}
	switch w.panicState {
	case traceNone:
		if strings.HasPrefix(line, "panic: ") || strings.HasPrefix(line, "fatal error: ") || goSignalRE.MatchString(line) {
			w.panicLine, w.panicState = line, tracePanicked
		}
	case tracePanicked:
		if strings.HasPrefix(line, "goroutine ") && strings.HasSuffix(line, ":") {
			w.panicState = traceFunc
		}
	case traceFunc:
		fn := line
		if i := strings.LastIndexByte(fn, '('); i > 0 {
			fn = fn[:i]
		}
		switch {
		case strings.HasPrefix(line, "\t"), strings.HasPrefix(line, "created by "):
			w.panicState = traceDone // not a frame: give up on the frame
		case fn == "panic" || strings.HasPrefix(fn, "runtime."):
			w.panicState = traceSkipFile
		default:
			w.frameFunc, w.panicState = fn, traceFile
		}
	case traceSkipFile:
		w.panicState = traceFunc
	case traceFile:
		file := strings.TrimSpace(line)
		if i := strings.Index(file, " +0x"); i > 0 {
			file = file[:i]
		}
		w.frame, w.panicState = w.frameFunc+" at "+file, traceDone
	}
}

// lastWords is what best explains the plugin's end: for a Go panic or
// fatal error its panic line and first frame (the stack trace's last line,
// a file name, says nothing); otherwise its last non-empty line, the
// message of an hclog JSON line. Empty when it wrote nothing.
func (w *stderrLog) lastWords() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.panicLine != "" {
		s := bound(w.panicLine)
		if w.frame != "" {
			s += " (in " + bound(w.frame) + ")"
		}
		return s
	}
	// A last line without its newline is the latest of all.
	if s := cleanLine(w.partial); strings.TrimSpace(s) != "" {
		return bound(logMessage(s))
	}
	return bound(logMessage(w.last))
}

// sawCookieNotice reports whether the plugin printed go-plugin's notice
// for a missing magic cookie.
func (w *stderrLog) sawCookieNotice() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.cookieNotice
}

// logMessage turns an hclog JSON line (what Serve's logger writes) into
// its message and fields; any other line is returned as it is.
func logMessage(line string) string {
	line = strings.TrimSpace(line)
	if !strings.HasPrefix(line, "{") {
		return line
	}
	var m map[string]any
	if json.Unmarshal([]byte(line), &m) != nil {
		return line
	}
	msg, ok := m["@message"].(string)
	if !ok {
		return line
	}
	keys := make([]string, 0, len(m))
	for k := range m {
		if !strings.HasPrefix(k, "@") {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		msg += fmt.Sprintf(" %s=%v", k, m[k])
	}
	return cleanLine([]byte(msg))
}

// bound cuts s to lastWordsMax bytes, on a rune boundary.
func bound(s string) string {
	s = strings.TrimSpace(s)
	if len(s) <= lastWordsMax {
		return s
	}
	cut := lastWordsMax
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "..."
}
