//go:build unix

package main

import (
	"os"
	"os/exec"
	"syscall"
)

// ownGroup starts cmd in a process group of its own and makes cancel and
// timeout kill the whole group: the Driver contract has Run kill the
// command's tree, whatever the driver claims. A daemon that left the group
// (setsid) survives, which is why leaky's process_tree_kill claim fails the
// tree cases.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != syscall.ESRCH {
			return err
		}
		return os.ErrProcessDone
	}
}
