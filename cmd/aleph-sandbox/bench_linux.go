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
	"strings"
	"sync"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
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
	Minimal bool                     `json:"minimal,omitempty"`
}

type rawRunsReply struct {
	Nanoseconds int64  `json:"ns"`
	Error       string `json:"error"`
}

// rawRunner returns a way that runs cmd through bubblewrap alone, with
// exactly the namespace and mount flags the bwrap driver would use for it
// (no sandbox-init, no cgroup, no plugin, no core): the baseline the
// pipeline's cost is measured against. The driver binary does the runs, in
// one process started here and kept for the whole benchmark, and times
// each bwrap run itself. It returns a nil way when the configured driver is
// not bwrap; stop ends the process. minimal asks for the smallest bwrap
// sandbox instead of the driver's flags (the floor of any bwrap sandbox).
func rawRunner(ctx context.Context, cfg core.Config, cmd core.Command, minimal bool) (way benchWay, stop func(), err error) {
	stop = func() {}
	path, _, err := core.FindDriver(cfg.Sandbox.Driver, nil)
	if err != nil {
		return nil, stop, err
	}
	if filepath.Base(path) != core.DriverBinaryName("bwrap") {
		return nil, stop, nil
	}
	if pin := driverPin(cfg, path); pin != "" {
		if err := checkPin(path, pin); err != nil {
			return nil, stop, err
		}
	}
	ws := cmd.Workspace
	if ws == "" {
		ws = filepath.Join(cfg.Sandbox.WorkspaceRoot, core.SessionDirName(cmd.SessionID))
	}
	if ws, err = filepath.EvalSymlinks(ws); err != nil {
		return nil, stop, fmt.Errorf("raw bwrap workspace: %w", err)
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
		Minimal: minimal,
	})
	if err != nil {
		return nil, stop, err
	}
	c := exec.CommandContext(ctx, path, rawRunsCommand)
	c.Env = append(os.Environ(), "ALEPH_DRIVER_OPTIONS="+string(cfg.DriverOptions("linux")))
	stderr := &limitedBuffer{max: 4096}
	c.Stderr = stderr
	in, err := c.StdinPipe()
	if err != nil {
		return nil, stop, err
	}
	outPipe, err := c.StdoutPipe()
	if err != nil {
		return nil, stop, err
	}
	if err := c.Start(); err != nil {
		return nil, stop, fmt.Errorf("raw bwrap: start %s: %w", path, err)
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
		return nil, func() {}, fmt.Errorf("raw bwrap: %w: %s", err, oneLine(stderr.String()))
	}
	out := bufio.NewReader(outPipe)
	way = func() (time.Duration, string) {
		if _, err := io.WriteString(in, "run\n"); err != nil {
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
	return way, stop, nil
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
