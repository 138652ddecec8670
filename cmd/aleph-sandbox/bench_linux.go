//go:build linux

package main

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/pluginhost"
)

// rawRunsCommand is the driver binary's mode that runs a command through
// bubblewrap alone with the driver's own flags (drivers/bwrap,
// RawRunsCommand). The CLI runs that mode instead of linking the driver:
// the host binary carries none of the driver's code.
const rawRunsCommand = "raw-bwrap-runs"

// rawRunsRequest and rawRunsReply are the lines of that mode
// (drivers/bwrap RawRunsRequest and RawRunsReply).
type rawRunsRequest struct {
	Request driverapi.ProfileRequest `json:"request"`
	Spec    driverapi.RunSpec        `json:"spec"`
}

type rawRunsReply struct {
	Nanoseconds int64  `json:"ns"`
	Error       string `json:"error"`
}

// rawRunner returns a way that runs cmd through bubblewrap alone, with
// exactly the namespace and mount flags the bwrap driver would use for it
// (no sandbox-init, no cgroup, no plugin, no core): the baseline the
// pipeline's cost is measured against; and minimal, a way that runs it in
// the smallest bwrap sandbox (every namespace, the system directories,
// /proc, /dev and the workspace): the floor of any bwrap-based sandbox.
// The driver binary does the runs, in one process started here and kept
// for the whole benchmark, and times each bwrap run itself. It returns nil
// ways when the configured driver is not bwrap; stop ends the process.
func rawRunner(ctx context.Context, cfg core.Config, cmd core.Command) (way, minimal benchWay, stop func(), err error) {
	stop = func() {}
	path, _, err := pluginhost.FindDriver(cfg.Sandbox.Driver, nil)
	if err != nil {
		return nil, nil, stop, err
	}
	if filepath.Base(path) != pluginhost.DriverBinaryName("bwrap") {
		return nil, nil, stop, nil
	}
	if pin := driverPin(cfg, path); pin != "" {
		if err := checkPin(path, pin); err != nil {
			return nil, nil, stop, err
		}
	}
	ws := cmd.Workspace
	if ws == "" {
		ws = filepath.Join(cfg.Sandbox.WorkspaceRoot, core.SessionDirName(cmd.SessionID))
	}
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, nil, stop, fmt.Errorf("raw bwrap workspace: %w", err)
	}
	cwd := ws
	if cmd.Cwd != "" {
		cwd = cmd.Cwd
		if !filepath.IsAbs(cwd) {
			cwd = filepath.Join(ws, cwd)
		}
	}
	// The environment core would give the child.
	envm := map[string]string{"PATH": core.DefaultPath, "HOME": ws, "LANG": "C.UTF-8", "TERM": "dumb", "TZ": "UTC"}
	for k, v := range cmd.Env {
		envm[k] = v
	}
	env := make([]driverapi.EnvVar, 0, len(envm))
	for k, v := range envm {
		env = append(env, driverapi.EnvVar{Name: k, Value: v})
	}
	sort.Slice(env, func(i, j int) bool { return env[i].Name < env[j].Name })
	req, err := json.Marshal(rawRunsRequest{
		Request: driverapi.ProfileRequest{Capabilities: cmd.Capabilities, Workspace: ws, Cwd: cwd},
		Spec: driverapi.RunSpec{Program: cmd.Program, Args: cmd.Args, Env: env, Stdin: cmd.Stdin, Cwd: cwd,
			Timeout: time.Minute, MaxOutputBytes: 1 << 20, SessionID: cmd.SessionID, CommandID: "bench-raw"},
	})
	if err != nil {
		return nil, nil, stop, err
	}
	c := exec.CommandContext(ctx, path, rawRunsCommand)
	c.Env = append(os.Environ(), "ALEPH_DRIVER_OPTIONS="+string(cfg.DriverOptions("linux")))
	stderr := &limitedBuffer{max: 4096}
	c.Stderr = stderr
	in, err := c.StdinPipe()
	if err != nil {
		return nil, nil, stop, err
	}
	outPipe, err := c.StdoutPipe()
	if err != nil {
		return nil, nil, stop, err
	}
	if err := c.Start(); err != nil {
		return nil, nil, stop, fmt.Errorf("raw bwrap: start %s: %w", path, err)
	}
	var once sync.Once
	stop = func() {
		once.Do(func() {
			in.Close()
			_ = c.Wait()
		})
	}
	if _, err := in.Write(append(req, '\n')); err != nil {
		stop()
		return nil, nil, func() {}, fmt.Errorf("raw bwrap: %w: %s", err, oneLine(stderr.String()))
	}
	out := bufio.NewReader(outPipe)
	var mu sync.Mutex
	runLine := func(what string) (time.Duration, string) {
		mu.Lock()
		defer mu.Unlock()
		if _, err := io.WriteString(in, what+"\n"); err != nil {
			return 0, "raw bwrap: " + err.Error() + ": " + oneLine(stderr.String())
		}
		line, err := out.ReadBytes('\n')
		if err != nil {
			return 0, "raw bwrap: the driver's raw mode ended: " + oneLine(stderr.String())
		}
		var r rawRunsReply
		if err := json.Unmarshal(line, &r); err != nil {
			return 0, "raw bwrap: " + err.Error()
		}
		if r.Error != "" {
			return 0, "raw bwrap: " + oneLine(r.Error)
		}
		return time.Duration(r.Nanoseconds), ""
	}
	way = func() (time.Duration, string) { return runLine("run") }
	minimal = func() (time.Duration, string) { return runLine("minimal") }
	return way, minimal, stop, nil
}

// checkPin refuses the binary at path unless its sha256 is pin (hex), as
// the plugin launch does for the pipeline's driver.
func checkPin(path, pin string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	sum := sha256.Sum256(b)
	if !strings.EqualFold(hex.EncodeToString(sum[:]), strings.TrimSpace(pin)) {
		return fmt.Errorf("%s does not match sandbox.driver_sha256", path)
	}
	return nil
}

// limitedBuffer keeps the first max bytes written to it.
type limitedBuffer struct {
	mu  sync.Mutex
	b   bytes.Buffer
	max int
}

func (l *limitedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func (l *limitedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if room := l.max - l.b.Len(); room > 0 {
		l.b.Write(p[:min(len(p), room)])
	}
	return len(p), nil
}

// tieToBench makes a process bench starts (its private serve, the CLI
// runs it times) end with bench: SIGTERM when bench dies, however it
// dies (a SIGKILL runs none of its cleanups). serve stops as on any
// SIGTERM (its driver and sandboxes go with it, by their own guards).
func tieToBench(c *exec.Cmd) {
	if c.SysProcAttr == nil {
		c.SysProcAttr = &syscall.SysProcAttr{}
	}
	c.SysProcAttr.Pdeathsig = syscall.SIGTERM
}

// processIdentity is "PID STARTTIME": the pid and its start time in clock
// ticks since boot (/proc/PID/stat's 22nd field), which together name one
// process for the life of the system even after the pid is reused.
func processIdentity(pid int) (string, bool) {
	return processIdentityOf(strconv.Itoa(pid))
}

// processIdentityOf is processIdentity of a pid given as text. known is
// false when no process has that pid (or its stat cannot be read).
func processIdentityOf(pid string) (id string, known bool) {
	if _, err := strconv.Atoi(pid); err != nil {
		return "", false
	}
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return "", false
	}
	// The command name (field 2) is in parentheses and may hold spaces:
	// the fields after it are counted from its closing parenthesis.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 { // f[0] is field 3 (state), f[19] field 22
		return "", false
	}
	return pid + " " + f[19], true
}

// ownedByMe reports whether path belongs to this process's user.
func ownedByMe(path string) bool {
	fi, err := os.Lstat(path)
	if err != nil {
		return false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return ok && int(st.Uid) == os.Getuid()
}
