//go:build linux

package bwrap

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The bridge is the only network path out of a sandbox whose network is an
// allowlist: inside the sandbox's own network namespace it listens on
// loopback TCP ports (the ones the child's proxy variables name) and relays
// each connection, byte for byte, to the host proxy's unix socket, which
// is bind-mounted into the sandbox. It makes no decisions: the proxy does.

// bridgeMaxConns bounds concurrent relays, so a child cannot make the
// bridge hold unbounded descriptors; the proxy has its own cap behind it.
const bridgeMaxConns = 512

// bridgeError says why the bridge could not start.
type bridgeError struct {
	Addr   string
	Reason string
}

func (e *bridgeError) Error() string {
	if e.Addr == "" {
		return "network bridge: " + e.Reason
	}
	return fmt.Sprintf("network bridge: %s: %s", e.Addr, e.Reason)
}

// bridge is a running relay. Close or cancelling the context it was started
// with stops it.
type bridge struct {
	socket string
	lns    []net.Listener
	sem    chan struct{}

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
	done   chan struct{}
	once   sync.Once
}

// openBridge binds every listen address (each must be a loopback IP
// literal with a port; port 0 picks a free one, see Addrs) before returning, so a caller can start the target
// as soon as it returns, and relays accepted connections to unixSocket.
func openBridge(ctx context.Context, listenAddrs []string, unixSocket string) (*bridge, error) {
	return startBridge(ctx, listenAddrs, unixSocket, nil)
}

// startBridge is openBridge with a hook that runs after every listener is
// bound and before the first connection is accepted; if it fails the
// bridge is closed and never serves.
func startBridge(ctx context.Context, listenAddrs []string, unixSocket string, beforeServe func() error) (*bridge, error) {
	if len(listenAddrs) == 0 {
		return nil, &bridgeError{Reason: "no listen addresses"}
	}
	if unixSocket == "" {
		return nil, &bridgeError{Reason: "no proxy socket"}
	}
	b := &bridge{
		socket: unixSocket,
		sem:    make(chan struct{}, bridgeMaxConns),
		conns:  map[net.Conn]struct{}{},
		done:   make(chan struct{}),
	}
	for _, a := range listenAddrs {
		ap, err := netip.ParseAddrPort(a)
		if err != nil || !ap.Addr().IsLoopback() {
			b.closeListeners()
			return nil, &bridgeError{Addr: a, Reason: "listen address must be a loopback IP literal with a port"}
		}
		ln, err := net.Listen("tcp", a)
		if err != nil {
			b.closeListeners()
			return nil, &bridgeError{Addr: a, Reason: err.Error()}
		}
		b.lns = append(b.lns, ln)
	}
	if beforeServe != nil {
		if err := beforeServe(); err != nil {
			b.closeListeners()
			return nil, &bridgeError{Reason: err.Error()}
		}
	}
	for _, ln := range b.lns {
		b.wg.Add(1)
		go b.accept(ln)
	}
	b.wg.Add(1)
	go func() {
		defer b.wg.Done()
		select {
		case <-ctx.Done():
			go b.Close()
		case <-b.done:
		}
	}()
	return b, nil
}

// runBridge starts a bridge and blocks until ctx ends, then stops it and
// waits for every relay to finish.
func runBridge(ctx context.Context, listenAddrs []string, unixSocket string) error {
	b, err := openBridge(ctx, listenAddrs, unixSocket)
	if err != nil {
		return err
	}
	<-ctx.Done()
	b.Close()
	return nil
}

// Addrs returns the bound listen addresses.
func (b *bridge) Addrs() []net.Addr {
	out := make([]net.Addr, len(b.lns))
	for i, ln := range b.lns {
		out[i] = ln.Addr()
	}
	return out
}

// Close stops accepting, ends every relay and waits for them. Idempotent.
func (b *bridge) Close() error {
	b.once.Do(func() {
		b.mu.Lock()
		b.closed = true
		for c := range b.conns {
			c.Close()
		}
		b.mu.Unlock()
		b.closeListeners()
		close(b.done)
		b.wg.Wait()
	})
	return nil
}

func (b *bridge) closeListeners() {
	for _, ln := range b.lns {
		ln.Close()
	}
}

func (b *bridge) track(cs ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range cs {
		b.conns[c] = struct{}{}
	}
	return true
}

func (b *bridge) untrack(cs ...net.Conn) {
	b.mu.Lock()
	for _, c := range cs {
		delete(b.conns, c)
	}
	b.mu.Unlock()
}

func (b *bridge) accept(ln net.Listener) {
	defer b.wg.Done()
	for {
		c, err := ln.Accept()
		if err != nil {
			// Closed: stop. Anything else (EMFILE when the child opens
			// too many connections) is transient: back off and go on.
			if errors.Is(err, net.ErrClosed) {
				return
			}
			select {
			case <-b.done:
				return
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case b.sem <- struct{}{}:
		default:
			// Over the cap: refuse at once rather than queue.
			c.Close()
			continue
		}
		if !b.track(c) {
			c.Close()
			<-b.sem
			return
		}
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			defer func() { <-b.sem }()
			b.relay(c)
		}()
	}
}

// relay joins one accepted TCP connection to a fresh connection to the
// proxy socket. End of stream in either direction is passed on as a
// half-close, so request/response protocols that close their sending side
// first keep working; an error on either side ends both.
func (b *bridge) relay(c net.Conn) {
	defer b.untrack(c)
	defer c.Close()
	up, err := net.Dial("unix", b.socket)
	if err != nil {
		return
	}
	defer up.Close()
	if !b.track(up) {
		return
	}
	defer b.untrack(up)
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src net.Conn) {
		defer wg.Done()
		if _, err := io.Copy(dst, src); err != nil {
			c.Close()
			up.Close()
			return
		}
		if cw, ok := dst.(interface{ CloseWrite() error }); ok {
			cw.CloseWrite()
		}
	}
	go pipe(up, c)
	go pipe(c, up)
	wg.Wait()
}

// bridgeCommand names the bridge's mode: `sandbox-bridge --socket PATH
// --listen ADDR [--listen ADDR...] [--ready-fd N]`. The driver binary runs
// it as `sandbox-net sandbox-bridge ...` under sandbox-init, which is the
// only way the supervisor starts it (see netSupervisorCommand); BridgeMain
// serves the same arguments unconfined for other launchers and tests.
const bridgeCommand = "sandbox-bridge"

// BridgeMain runs the bridge for the sandbox-bridge subcommand (args
// exclude the subcommand). Once every address is bound it writes "ready\n"
// to --ready-fd (and closes it), so the launcher starts the target only
// after the bridge listens. It runs until SIGTERM or SIGINT, or until the
// sandbox's PID namespace is torn down. Exit status 0 after a signal, 2 on
// bad arguments or a failed start, with one line on stderr.
func BridgeMain(args []string) int { return bridgeMain(args, nil) }

// bridgeMain is BridgeMain with a hook run between binding and serving (the
// confined bridge's seccomp lock).
func bridgeMain(args []string, beforeServe func() error) int {
	var socket string
	var listen []string
	readyFD := -1
	for i := 0; i < len(args); i++ {
		next := func() (string, bool) {
			if i+1 >= len(args) {
				return "", false
			}
			i++
			return args[i], true
		}
		var ok bool
		switch args[i] {
		case "--socket":
			socket, ok = next()
		case "--listen":
			var a string
			a, ok = next()
			listen = append(listen, a)
		case "--ready-fd":
			var v string
			if v, ok = next(); ok {
				n, err := strconv.Atoi(v)
				ok = err == nil && n > 2
				readyFD = n
			}
		}
		if !ok {
			fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: bad argument %q\n", bridgeCommand, args[i])
			return 2
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	b, err := startBridge(ctx, listen, socket, beforeServe)
	if err != nil {
		fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: %v\n", bridgeCommand, err)
		return 2
	}
	if readyFD >= 0 {
		f := os.NewFile(uintptr(readyFD), "ready")
		_, err := f.Write([]byte("ready\n"))
		f.Close()
		if err != nil {
			b.Close()
			fmt.Fprintf(os.Stderr, "aleph-sandbox: %s: ready fd: %v\n", bridgeCommand, err)
			return 2
		}
	}
	<-ctx.Done()
	b.Close()
	return 0
}
