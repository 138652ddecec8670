//go:build linux

package bwrap

import (
	"fmt"
	"strings"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// notRunError is the error of a command whose program never ran, as the
// supervisor's status record says (st.NotRun): an InvalidSpecError naming
// the program and what the errno means for it when the program is what is
// wrong (sandboxinit.ProgramErrno), else the driver's own failure to start
// it.
func notRunError(spec driverapi.RunSpec, st sandboxinit.Status) error {
	prog := spec.Program
	var why string
	switch e := st.Errno; {
	case !sandboxinit.ProgramErrno(e):
		return fmt.Errorf("bwrap driver: the command could not be started: %q: %w", prog, e)
	case e == syscall.ENOENT && st.NotRun == sandboxinit.NotRunLookup && !strings.Contains(prog, "/"):
		path, ok := "", false
		for _, v := range spec.Env {
			if v.Name == "PATH" {
				path, ok = v.Value, true
			}
		}
		if !ok {
			why = fmt.Sprintf("%q was not found: the command's environment has no PATH to look it up in; name it by its path, or set PATH", prog)
		} else {
			why = fmt.Sprintf("%q was not found in the command's PATH (%s)", prog, path)
		}
	case e == syscall.ENOENT && st.NotRun == sandboxinit.NotRunLookup:
		why = fmt.Sprintf("%q does not exist in the sandbox (it sees the system directories, the workspace and the granted paths)", prog)
	case e == syscall.ENOENT:
		why = fmt.Sprintf("%q cannot be run: the interpreter its #! line names, or its ELF loader, does not exist in the sandbox", prog)
	case e == syscall.EACCES:
		why = fmt.Sprintf("%q cannot be run: permission denied (it is not executable, or the sandbox does not let programs run from where it is)", prog)
	case e == syscall.EISDIR:
		why = fmt.Sprintf("%q is a directory", prog)
	case e == syscall.ENOEXEC:
		why = fmt.Sprintf("%q cannot be run: exec format error (not a program for this machine, and no #! line)", prog)
	case e == syscall.E2BIG:
		why = fmt.Sprintf("%q cannot be run: argument list too long (with what its interpreter adds, the arguments and environment are more than the kernel takes at exec)", prog)
	default:
		why = fmt.Sprintf("%q cannot be run: %v", prog, e)
	}
	return &driverapi.InvalidSpecError{Field: "program", Reason: why}
}
