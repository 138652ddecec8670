//go:build unix

package driverapi

import (
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// lifelineEnv names the descriptor of the plugin's lifeline: the read end
// of a pipe whose only write end stays in the host. The plugin exits when it
// reads EOF, that is when the host closes it (Kill) or the host process
// dies in any way, SIGKILL included, so a plugin never outlives its host
// (and its sandboxes, which die with the plugin, never outlive it either).
const lifelineEnv = "ALEPH_PLUGIN_LIFELINE_FD"

// handover is what launch passes to a plugin process besides its argv:
// the TLS material and the lifeline.
type handover struct {
	tlsConfig *tls.Config
	// key is the keyed transport's secret, nil when it is not offered;
	// keyDir is where a plugin that takes the offer makes its socket.
	key       []byte
	keyDir    string
	childEnds []*os.File
	lifeline  io.Closer
	// socketDir is a private (0700) directory made for this launch, where
	// the plugin creates its unix socket instead of the shared temporary
	// directory; removing it after the plugin ends leaves nothing behind,
	// however the plugin ended.
	socketDir string
}

// socketDirPrefix marks directories made by newHandover, so a plugin only
// ever removes a directory of ours.
const socketDirPrefix = "aleph-plugin-"

// newHandover prepares cmd: the TLS pipe at descriptor 3 and the lifeline
// at 4 (ExtraFiles start at 3). Unless mutualTLS forces TLS, it offers the
// keyed transport (transport.go) when its conditions hold here: the peer's
// uid can be read and the socket directory is private.
func newHandover(cmd *exec.Cmd, mutualTLS bool) (*handover, error) {
	dir, err := os.MkdirTemp("", socketDirPrefix)
	if err != nil {
		return nil, fmt.Errorf("plugin socket directory: %w", err)
	}
	var key []byte
	if !mutualTLS && peerCredSupported && privateDir(dir) {
		key = make([]byte, transportKeySize)
		if _, err := rand.Read(key); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("transport key: %w", err)
		}
	}
	ht, err := newHostTLS(3, key)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("mutual TLS: %w", err)
	}
	lr, lw, err := os.Pipe()
	if err != nil {
		ht.pipe.Close()
		os.RemoveAll(dir)
		return nil, fmt.Errorf("lifeline pipe: %w", err)
	}
	cmd.Env = append(cmd.Env, ht.env...)
	cmd.Env = append(cmd.Env, lifelineEnv+"=4", socketDirEnv+"="+dir)
	h := &handover{tlsConfig: ht.config, childEnds: []*os.File{ht.pipe, lr}, lifeline: lw, socketDir: dir}
	if key != nil {
		cmd.Env = append(cmd.Env, transportEnv+"="+transportKeyed)
		h.key, h.keyDir = key, filepath.Join(dir, keySocketSubdir)
	}
	cmd.ExtraFiles = []*os.File{ht.pipe, lr}
	return h, nil
}

// privateDir reports whether dir is a directory (not a link) owned by this
// process's uid that nobody else may enter: then only this uid (and root)
// can connect to a socket in it or put one in its place.
func privateDir(dir string) bool {
	st, err := os.Lstat(dir)
	if err != nil || !st.IsDir() || st.Mode().Perm()&0o077 != 0 {
		return false
	}
	sys, ok := st.Sys().(*syscall.Stat_t)
	return ok && int(sys.Uid) == os.Geteuid()
}

// takeKeyedTransport, in the plugin, takes the host's offer of the keyed
// transport when it can keep its side of it: the host sent a key, the
// peer's uid can be read here, and the socket directory the host named is
// private. It then makes the subdirectory that tells the host so and
// points go-plugin's socket there. The offer's variable is removed either
// way, so nothing the plugin starts sees it.
func takeKeyedTransport(key []byte) bool {
	offered := os.Getenv(transportEnv) == transportKeyed
	os.Unsetenv(transportEnv)
	dir := os.Getenv(socketDirEnv)
	if !offered || key == nil || !peerCredSupported || dir == "" || !privateDir(dir) {
		return false
	}
	sub := filepath.Join(dir, keySocketSubdir)
	if err := os.Mkdir(sub, 0o700); err != nil {
		return false
	}
	os.Setenv(socketDirEnv, sub)
	return true
}

// socketDirEnv is go-plugin's variable for where a plugin makes its socket.
const socketDirEnv = "PLUGIN_UNIX_SOCKET_DIR"

// cleanup ends the lifeline and removes the socket directory; for after the
// plugin process has ended (or never started).
func (h *handover) cleanup() {
	_ = h.lifeline.Close()
	_ = os.RemoveAll(h.socketDir)
}

// closeChildEnds closes the host's copies of the descriptors the plugin
// inherited.
func (h *handover) closeChildEnds() {
	for _, f := range h.childEnds {
		_ = f.Close()
	}
}

// watchLifeline, in the plugin, exits the process when the host's end of
// the lifeline closes. Without the variable (an older host) it does nothing.
func watchLifeline() error {
	v, ok := os.LookupEnv(lifelineEnv)
	if !ok {
		return nil
	}
	os.Unsetenv(lifelineEnv)
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return fmt.Errorf("%s=%q is not a descriptor", lifelineEnv, v)
	}
	// Inherited descriptors lose close-on-exec: restore it, so nothing the
	// plugin starts (bwrap, a sandbox) holds the lifeline.
	syscall.CloseOnExec(fd)
	f := os.NewFile(uintptr(fd), "lifeline")
	if f == nil {
		return fmt.Errorf("%s=%d is not open", lifelineEnv, fd)
	}
	// The host's directory, taken now: the keyed transport points the
	// variable at a subdirectory of it later.
	dir := os.Getenv(socketDirEnv)
	go func() {
		_, _ = io.Copy(io.Discard, f)
		// The host is gone or done with us. A host that died cannot remove
		// our socket directory: do it here. Exiting ends the threads that
		// started sandboxes, so their parent-death signals fire.
		if strings.HasPrefix(filepath.Base(dir), socketDirPrefix) {
			_ = os.RemoveAll(dir)
		}
		os.Exit(0)
	}()
	return nil
}

// markInheritedCloseOnExec sets close-on-exec on every descriptor above 2
// that the plugin process was started with. A host may leak descriptors it
// opened without close-on-exec (a terminal, a socket, a pipe of whatever
// started it) into the plugin, and os/exec passes every such descriptor on
// to each process the driver starts: the sandboxed command would get them.
// The TLS and lifeline descriptors are taken over before this runs.
func markInheritedCloseOnExec() {
	for _, dir := range []string{"/proc/self/fd", "/dev/fd"} {
		ents, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, e := range ents {
			if fd, err := strconv.Atoi(e.Name()); err == nil && fd > 2 {
				syscall.CloseOnExec(fd)
			}
		}
		return
	}
	for fd := 3; fd < 1024; fd++ {
		syscall.CloseOnExec(fd)
	}
}
