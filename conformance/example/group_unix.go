//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own and makes cancel and
// timeout kill the whole group: Run must kill the command's tree, and a
// child the command starts in the background is in its group. A daemon
// that called setsid has left it; killing that one too is the
// process_tree_kill feature (a cgroup or a PID namespace), not claimed here.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != syscall.ESRCH {
			return err
		}
		return os.ErrProcessDone // the group is gone already
	}
}
