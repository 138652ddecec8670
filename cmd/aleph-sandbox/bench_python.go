package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	alephsandbox "github.com/aleph-sandbox/aleph-sandbox"
	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The "serve, Python client" row: a command in an existing session
// through the private serve from the Python client (clients/python), the
// round trip a Python program pays, beside the Go client's "serve, session
// reused". One python3 process runs every command of the row; the bench
// asks for one command per line on its stdin and the process times the
// client's exec call itself (time.perf_counter_ns around it), so neither
// the interpreter's start nor the pipe to it is counted.

// pyBenchScript is what python3 runs. Its first line in is the command
// (argv and exec's keyword arguments, stdin base64); it answers "ready",
// or "skip REASON" when the client cannot be imported; then per line in,
// "ok NANOSECONDS" or "fail REASON".
const pyBenchScript = `import base64, json, sys, time
try:
    from aleph_sandbox import Client
except ImportError as e:
    print("skip the Python client cannot be imported: " + str(e), flush=True)
    sys.exit(0)
spec = json.loads(sys.stdin.readline())
kw = spec["kwargs"]
if "stdin" in kw:
    kw["stdin"] = base64.b64decode(kw["stdin"])
c = Client(spec["address"])
print("ready", flush=True)
for _ in sys.stdin:
    t = time.perf_counter_ns()
    try:
        r = c.exec(spec["argv"], **kw)
    except Exception as e:
        print("fail " + " ".join(str(e).split()), flush=True)
        continue
    took = time.perf_counter_ns() - t
    if r.denied:
        print("fail denied: " + " ".join(r.reason.split()), flush=True)
    elif r.exit_code != 0 or r.signal != 0:
        print("fail the command exited %s (signal %d)" % (r.exit_code, r.signal), flush=True)
    else:
        print("ok %d" % took, flush=True)
`

// pyBench is the running python3 of the row.
type pyBench struct {
	cmd    *exec.Cmd
	stderr *syncBuffer // what python3 said, for a failure's message
	in     io.WriteCloser
	out    *bufio.Reader
	done   chan struct{}
}

// errNoPython: the row is skipped (no python3, or no client to import);
// the message says why.
var errNoPython = errors.New("no Python client row")

// pythonClientDir is the directory holding the Python client's package
// beside this binary in a checkout or a release tree (bin/ and
// clients/python/ side by side), "" when there is none: python3 then
// imports an installed one, if any.
func pythonClientDir() string {
	self, err := os.Executable()
	if err != nil {
		return ""
	}
	dir := filepath.Join(filepath.Dir(self), "..", "clients", "python")
	if _, err := os.Stat(filepath.Join(dir, "aleph_sandbox", "__init__.py")); err != nil {
		return ""
	}
	return dir
}

// pyKwargs is cmd as the Python client's exec keyword arguments, the same
// request the Go client's row sends (hostclient.ExecuteRequest).
func pyKwargs(cmd core.Command) map[string]any {
	c := cmd.Capabilities
	kw := map[string]any{"session": cmd.SessionID, "spawn": c.SpawnSubprocess}
	if cmd.Workspace != "" {
		kw["workspace"] = cmd.Workspace
	}
	if cmd.Cwd != "" {
		kw["cwd"] = cmd.Cwd
	}
	if len(c.FSRead) > 0 {
		kw["read"] = c.FSRead
	}
	if len(c.FSWrite) > 0 {
		kw["write"] = c.FSWrite
	}
	if c.Network.Mode == driverapi.NetworkAllowHosts {
		kw["net"] = c.Network.Hosts
	} else {
		kw["net"] = alephsandbox.NetString(c.Network)
	}
	if c.MaxMemoryMB > 0 {
		kw["memory_mb"] = c.MaxMemoryMB
	}
	if cmd.Timeout > 0 {
		kw["timeout"] = cmd.Timeout.Seconds()
	}
	if cmd.MaxOutputBytes > 0 {
		kw["max_output"] = cmd.MaxOutputBytes
	}
	if len(cmd.Env) > 0 {
		kw["env"] = cmd.Env
	}
	if len(cmd.Stdin) > 0 {
		kw["stdin"] = cmd.Stdin // []byte: base64 in JSON, decoded by the script
	}
	if cmd.Layered {
		kw["layered"] = true
	}
	return kw
}

// startPyBench starts python3 with the client for cmd through the serve
// at sock. An error wrapping errNoPython: the row cannot run here.
func startPyBench(ctx context.Context, sock string, cmd core.Command) (*pyBench, error) {
	py, err := exec.LookPath("python3")
	if err != nil {
		return nil, fmt.Errorf("%w: python3: %w", errNoPython, err)
	}
	if len(cmd.Secrets) > 0 {
		return nil, fmt.Errorf("%w: the command has secrets (the row sends none)", errNoPython)
	}
	c := exec.CommandContext(ctx, py, "-c", pyBenchScript)
	c.Env = os.Environ()
	if dir := pythonClientDir(); dir != "" {
		pp := dir
		if old := os.Getenv("PYTHONPATH"); old != "" {
			pp += string(os.PathListSeparator) + old
		}
		c.Env = append(c.Env, "PYTHONPATH="+pp)
	}
	stderr := &syncBuffer{}
	c.Stderr = stderr
	tieToBench(c)
	in, err := c.StdinPipe()
	if err != nil {
		return nil, err
	}
	outp, err := c.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, fmt.Errorf("%w: %w", errNoPython, err)
	}
	p := &pyBench{cmd: c, stderr: stderr, in: in, out: bufio.NewReader(outp), done: make(chan struct{})}
	go func() { _ = c.Wait(); close(p.done) }()
	spec, err := json.Marshal(map[string]any{"address": "unix:" + sock, "argv": append([]string{cmd.Program}, cmd.Args...), "kwargs": pyKwargs(cmd)})
	if err == nil {
		_, err = fmt.Fprintf(in, "%s\n", spec)
	}
	var line string
	if err == nil {
		line, err = p.out.ReadString('\n')
	}
	line = strings.TrimSpace(line)
	switch {
	case err != nil:
		p.stop()
		return nil, fmt.Errorf("python3: %w: %s", err, oneLine(stderr.String()))
	case strings.HasPrefix(line, "skip "):
		p.stop()
		return nil, fmt.Errorf("%w: %s", errNoPython, strings.TrimPrefix(line, "skip "))
	case line != "ready":
		p.stop()
		return nil, fmt.Errorf("python3: %q", line)
	}
	return p, nil
}

// way is one command of the row, as the Python client timed it.
func (p *pyBench) way() (time.Duration, string) {
	if _, err := io.WriteString(p.in, "\n"); err != nil {
		return 0, "Python client: " + err.Error()
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return 0, "Python client: " + err.Error() + ": " + oneLine(p.stderr.String())
	}
	line = strings.TrimSpace(line)
	if ns, ok := strings.CutPrefix(line, "ok "); ok {
		n, err := strconv.ParseInt(ns, 10, 64)
		if err != nil || n <= 0 {
			return 0, fmt.Sprintf("Python client: %q", line)
		}
		return time.Duration(n), ""
	}
	return 0, "Python client: " + strings.TrimPrefix(line, "fail ")
}

// stop ends python3 (its stdin closed ends its loop; killed if it does
// not end).
func (p *pyBench) stop() {
	_ = p.in.Close()
	select {
	case <-p.done:
	case <-time.After(5 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}
