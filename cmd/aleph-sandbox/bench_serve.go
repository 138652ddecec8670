package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
	hostclient "github.com/aleph-sandbox/aleph-sandbox/service/client"
)

// benchServe is a private `aleph-sandbox serve` that bench starts for its
// daemon rows, on a socket in a temporary directory of its own.
type benchServe struct {
	dir, sock string
	cmd       *exec.Cmd
	stderr    *syncBuffer
	done      chan struct{}
}

// syncBuffer is the server's stderr, read when it fails to start.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startBenchServe runs serve with bench's --config and --driver, the rate
// limit off (as for every other row), and waits until it answers.
func startBenchServe(ctx context.Context, f *runFlags) (*benchServe, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("locate own binary: %w", err)
	}
	sweepBenchDirs(os.TempDir())
	dir, err := os.MkdirTemp("", benchServePrefix)
	if err != nil {
		return nil, err
	}
	if err := markBenchDir(dir); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	s := &benchServe{dir: dir, sock: filepath.Join(dir, "run", "aleph.sock"), stderr: &syncBuffer{}, done: make(chan struct{})}
	args := []string{"serve", "--listen", "unix:" + s.sock}
	if f.config != "" {
		args = append(args, "--config", f.config)
	}
	if f.driver != "" {
		args = append(args, "--driver", f.driver)
	}
	if f.yes {
		args = append(args, "--yes")
	}
	s.cmd = exec.Command(self, args...)
	s.cmd.Env = append(os.Environ(), core.EnvPrefix+"RATE_LIMIT__ENABLED=false", "ALEPH_SANDBOX_LOG=warn")
	if f.workspaceRoot != "" {
		s.cmd.Env = append(s.cmd.Env, core.EnvPrefix+"WORKSPACE_ROOT="+f.workspaceRoot)
	}
	s.cmd.Stderr = s.stderr
	// A killed bench must not leave its private serve (and driver) behind.
	tieToBench(s.cmd)
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	c := hostclient.Unix(s.sock)
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, err := c.CheckPolicy(ctx, connect.NewRequest(&hostv1.CheckPolicyRequest{Command: "true"}))
		if err == nil {
			return s, nil
		}
		select {
		case <-s.done:
			_ = os.RemoveAll(dir)
			return nil, fmt.Errorf("serve exited: %s", oneLine(s.stderr.String()))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			s.stop()
			return nil, errors.New("serve did not answer within 20s")
		}
	}
}

// stop ends the server (SIGTERM, then SIGKILL) and removes its directory.
func (s *benchServe) stop() {
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.done
	}
	_ = os.RemoveAll(s.dir)
}

// roundTrip is one command through the service from this process, over
// the socket as the language clients send it: the in-service cost.
func (s *benchServe) roundTrip(ctx context.Context, cmd core.Command) func() string {
	c := hostclient.Unix(s.sock)
	req := hostclient.ExecuteRequest(cmd)
	req.AnswerApprovals = false
	return func() string {
		st, err := c.Execute(ctx, connect.NewRequest(req))
		if err != nil {
			return "through serve: " + oneLine(err.Error())
		}
		defer st.Close()
		var res *hostv1.ExecResult
		for st.Receive() {
			if r := st.Msg().GetResult(); r != nil {
				res = r
			}
		}
		switch {
		case st.Err() != nil:
			return "through serve: " + oneLine(st.Err().Error())
		case res == nil:
			return "through serve: no result"
		case res.GetDenied():
			return "through serve: denied: " + oneLine(res.GetReason())
		case res.GetExitCode() != 0 || res.GetSignal() != 0:
			return fmt.Sprintf("through serve: the command exited %d (signal %d)", res.GetExitCode(), res.GetSignal())
		}
		return ""
	}
}

// hostFlags are exec flags that apply with --host (the service's own
// configuration and driver replace --config, --driver, --workspace-root).
func hostFlags(flags []string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		name, _, hasValue := strings.Cut(strings.TrimLeft(flags[i], "-"), "=")
		switch name {
		case "config", "driver", "workspace-root":
			if !hasValue {
				i++
			}
			continue
		}
		out = append(out, flags[i])
	}
	return out
}

// selfRunner runs this binary with args, a fresh process each time.
func selfRunner(ctx context.Context, what string, args []string, stdin []byte) (func() string, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("%s: locate own binary: %w", what, err)
	}
	return func() string {
		c := exec.CommandContext(ctx, self, args...)
		tieToBench(c)
		if len(stdin) > 0 {
			c.Stdin = bytes.NewReader(stdin)
		}
		var stderr bytes.Buffer
		c.Stderr = &stderr
		if err := c.Run(); err != nil {
			return what + ": " + err.Error() + ": " + oneLine(stderr.String())
		}
		return ""
	}, nil
}

// inSession is roundTrip for cmd in session id: a session of bench's own,
// so its first command builds the session's sandbox and the later ones
// reuse it.
func (s *benchServe) inSession(ctx context.Context, cmd core.Command, id string) func() string {
	cmd.SessionID = id
	return s.roundTrip(ctx, cmd)
}

// deleteSession ends a session bench made (its sandbox, its processes)
// and removes the workspace the service made for it, so the benchmark
// leaves nothing in the workspace root.
func (s *benchServe) deleteSession(ctx context.Context, id string) error {
	_, err := hostclient.Unix(s.sock).Sessions(ctx, connect.NewRequest(&hostv1.SessionsRequest{
		Action: &hostv1.SessionsRequest_Delete{Delete: &hostv1.DeleteSession{Session: id}}}))
	if err != nil {
		return fmt.Errorf("delete session %s: %w", id, err)
	}
	return nil
}

// benchSessionID names the i-th session of a kind that bench process pid
// opens: its own, so no other client's session is touched or deleted.
func benchSessionID(pid int, kind string, i int) string {
	return fmt.Sprintf("bench-%d-%s-%d", pid, kind, i)
}

// benchNewSessions is how many new sessions the "serve, new session" row
// opens: each first command builds a session sandbox (tens of
// milliseconds), so a few keep the bench short.
const benchNewSessions = 5

// benchNewSessionGap is the pause between two of the row's new sessions.
// A new session's first command takes a session sandbox the driver built
// ahead, and the next one is built once that command is answered: 26-280
// ms on two loaded cores. A session arriving sooner waits for the rest of
// that build (docs/performance.md): with benchSettle's 40 ms two to four
// of the five did, and the row measured how fast sessions can follow each
// other rather than a new session's first command. The gap is the
// arrival the row stands for, and what BenchmarkSession does (it waits
// for the build, untimed).
const benchNewSessionGap = 300 * time.Millisecond

// newSessionRuns times the first command of k sessions bench opens
// through s, each deleted after its command (outside the timing, then a
// pause for its sandbox's teardown and the next one's build ahead).
func (s *benchServe) newSessionRuns(ctx context.Context, cmd core.Command, k int) ([]time.Duration, string) {
	lat := make([]time.Duration, 0, k)
	for i := 0; i < k; i++ {
		id := benchSessionID(os.Getpid(), "new", i)
		took, msg := runWay(timed(s.inSession(ctx, cmd, id)))
		if err := s.deleteSession(ctx, id); err != nil && msg == "" {
			msg = oneLine(err.Error())
		}
		if msg != "" {
			return lat, "new session: " + msg
		}
		lat = append(lat, took)
		time.Sleep(benchNewSessionGap)
	}
	return lat, ""
}

// sessionWorkers returns c ways through s, each in a session of its own
// whose first command (which builds the session's sandbox) has run, and
// the function that deletes those sessions.
func (s *benchServe) sessionWorkers(ctx context.Context, cmd core.Command, c int) ([]benchWay, func(), string) {
	var ids []string
	done := func() {
		for _, id := range ids {
			_ = s.deleteSession(context.WithoutCancel(ctx), id)
		}
	}
	ways := make([]benchWay, c)
	for w := range ways {
		id := benchSessionID(os.Getpid(), "worker", w)
		ids = append(ids, id)
		run := s.inSession(ctx, cmd, id)
		if msg := run(); msg != "" {
			return nil, done, "warm-up of " + id + ": " + msg
		}
		ways[w] = timed(run)
	}
	return ways, done, ""
}
