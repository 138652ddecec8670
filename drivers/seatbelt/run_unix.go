//go:build unix

package seatbelt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// runProcess starts ps in a session of its own, feeds stdin, streams the
// output within budget and kills the whole process group on timeout or
// cancel.
func runProcess(ctx context.Context, ps processSpec, streams driverapi.Streams) (driverapi.Exit, error) {
	start := time.Now()
	outBudget, errBudget := driverapi.StreamBudgets(ps.budget)
	// A nil stream is fine: BudgetWriter then only counts. Chunking for
	// the wire is done by driverapi's gRPC server.
	stdout := driverapi.NewBudgetWriter(streams.Stdout, outBudget)
	stderr := driverapi.NewBudgetWriter(streams.Stderr, errBudget)

	cmd := exec.Command(ps.argv[0], ps.argv[1:]...)
	cmd.Env = ps.env
	if ps.withShim {
		// The shim gets nothing: the environment goes over shimEnvFD.
		cmd.Env = []string{}
	}
	cmd.Dir = ps.dir
	cmd.Stdin = bytes.NewReader(ps.stdin)
	cmd.Stdout = stdout
	cmd.Stderr = stderr
	// A new session, not only a process group: the command has no
	// controlling terminal, so it cannot open /dev/tty and push input into
	// the user's terminal (TIOCSTI). The session leader's pid is also the
	// process group id, so the timeout still kills -pgid: the command and
	// every descendant that stayed in the group.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	// A grandchild that keeps the pipes open must not hang Wait.
	cmd.WaitDelay = 2 * time.Second

	var statusR, envW *os.File
	if ps.withShim {
		r, w, err := os.Pipe()
		if err != nil {
			return driverapi.Exit{}, fmt.Errorf("seatbelt: status pipe: %w", err)
		}
		statusR = r
		defer r.Close()
		defer w.Close()
		er, ew, err := os.Pipe()
		if err != nil {
			return driverapi.Exit{}, fmt.Errorf("seatbelt: environment pipe: %w", err)
		}
		envW = ew
		defer er.Close()
		defer ew.Close()
		cmd.ExtraFiles = []*os.File{w, er} // fds 3 and 4 in the shim
	}
	if err := cmd.Start(); err != nil {
		return driverapi.Exit{}, fmt.Errorf("seatbelt: start %s: %w", ps.argv[0], err)
	}
	pgid := cmd.Process.Pid
	killGroup := func() { _ = syscall.Kill(-pgid, syscall.SIGKILL) }

	if envW != nil {
		// The parent's copies of the child's ends; then the environment,
		// written while the shim reads it (it may exceed a pipe buffer).
		cmd.ExtraFiles[1].Close()
		env := encodeEnv(ps.env)
		go func() {
			_, _ = envW.Write(env)
			envW.Close()
		}()
	}
	if statusR != nil {
		cmd.ExtraFiles[0].Close() // the parent's copy of the write end
		msg, _ := io.ReadAll(io.LimitReader(statusR, 4096))
		if len(msg) > 0 {
			killGroup()
			_ = cmd.Wait()
			return driverapi.Exit{}, errors.New(strings.TrimSpace(string(msg)))
		}
	}

	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	timer := time.NewTimer(ps.timeout)
	defer timer.Stop()
	var timedOut bool
	var waitErr error
	select {
	case waitErr = <-done:
	case <-timer.C:
		timedOut = true
		killGroup()
		waitErr = <-done
	case <-ctx.Done():
		killGroup()
		<-done
		return driverapi.Exit{}, ctx.Err()
	}
	// Whatever the leader did, nothing of its group outlives the command.
	killGroup()

	exit := driverapi.Exit{
		StdoutBytes: stdout.Total(),
		StderrBytes: stderr.Total(),
		Truncated:   stdout.Truncated() || stderr.Truncated(),
		Duration:    time.Since(start),
	}
	st := cmd.ProcessState
	if st == nil {
		return driverapi.Exit{}, fmt.Errorf("seatbelt: wait: %w", waitErr)
	}
	if ws, ok := st.Sys().(syscall.WaitStatus); ok {
		exit.ExitCode, exit.Signal = exitFromStatus(ws.ExitStatus(), ws.Signaled(), int(ws.Signal()))
	} else {
		exit.ExitCode = int32(st.ExitCode())
	}
	if timedOut {
		exit.TimedOut = true
		exit.ExitCode, exit.Signal = 137, int32(syscall.SIGKILL)
	}
	if ru, ok := st.SysUsage().(*syscall.Rusage); ok && ru != nil {
		exit.Usage = driverapi.ResourceUsage{
			MaxRSSKB: maxRSSKB(runtime.GOOS, int64(ru.Maxrss)),
			UserMS:   st.UserTime().Milliseconds(),
			SystemMS: st.SystemTime().Milliseconds(),
		}
	}
	return exit, nil
}
