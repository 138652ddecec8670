package conformance

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/conformance/internal/probe"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Channels besides the file system through which a command could reach
// the host: descriptors it inherits, the host's SysV IPC objects, the
// host's process table.

func leakCases() []Case {
	rd := driverapi.FeatureFSReadIsolation
	return []Case{
		{ID: "proc/only-std-fds-inherited", Level: Must, OS: POSIXOnly, OSReason: "descriptor numbers are POSIX's (Windows handles are not inherited unless asked for)",
			Description: "The program starts with only descriptors 0, 1 and 2 open (checked with fcntl for every number up to the descriptor limit; the probe's own close-on-exec descriptors are not inherited ones), with and without stdin: no driver pipe, log, lock or directory reaches it.",
			run:         caseStdFDs},
		{ID: "proc/host-sysv-ipc-invisible", Level: Must, Feature: rd, OS: LinuxOnly, OSReason: "SysV IPC namespaces are Linux's",
			Description: "A SysV shared memory segment, message queue and semaphore set the suite creates on the host at random keys cannot be found by those keys in the sandbox; the program ran and looked each up.",
			run:         caseSysV},
		{ID: "proc/host-processes-invisible", Level: Must, Feature: rd, OS: LinuxOnly, OSReason: "the process table is read from /proc",
			Description: "A host process the suite starts with a random marker in its command line is not in the sandbox's process table (no /proc/PID/cmdline shows the marker); the program ran.",
			run:         caseHostProcesses},
	}
}

func caseStdFDs(ctx context.Context, h *H) error {
	for _, stdin := range [][]byte{nil, []byte("some stdin\n")} {
		o := h.Exec(ctx, h.ProbeCmd(Cmd{Stdin: stdin}, "fds"))
		if err := ok("fds", o); err != nil {
			return err
		}
		if !bytes.Contains(o.Stdout, []byte("fds-checked")) {
			return fmt.Errorf("the probe did not finish its check (positive control): %s", o)
		}
		if bytes.Contains(o.Stdout, []byte("fd:")) {
			return fmt.Errorf("the program inherited descriptors beyond 0, 1 and 2 (stdin given: %v): %s",
				stdin != nil, strings.TrimSpace(strings.ReplaceAll(string(o.Stdout), "fds-checked", "")))
		}
	}
	return nil
}

func caseSysV(ctx context.Context, h *H) error {
	objs, remove, err := createSysV()
	if err != nil {
		return skipf("%v", err)
	}
	defer remove()
	steps := []string{"echo", "alive"}
	for _, o := range objs {
		steps = append(steps, sep, "sysv", o.kind, fmt.Sprint(o.key))
	}
	o := h.Probe(ctx, nil, steps...)
	if err := ran("probe", o, "alive"); err != nil {
		return err
	}
	for _, obj := range objs {
		if bytes.Contains(o.Stdout, []byte("sysv-"+obj.kind+":visible")) {
			return fmt.Errorf("the host's SysV %s object (key %d) is visible in the sandbox: it shares the host's IPC namespace", obj.kind, obj.key)
		}
		if !bytes.Contains(o.Stdout, []byte("sysv-"+obj.kind+":absent")) {
			return fmt.Errorf("the probe did not look up the SysV %s object (positive control): %s", obj.kind, o)
		}
	}
	return nil
}

func caseHostProcesses(ctx context.Context, h *H) error {
	p, err := h.suite.suiteProbe()
	if err != nil {
		return err
	}
	tok := newToken()
	// The marker is the probe itself, sleeping on the host; only its own
	// command line holds "hostmark-"+tok.
	marker := exec.Command(p, probe.Magic, "echo", "hostmark-"+tok, sep, "sleep", "20")
	if err := marker.Start(); err != nil {
		return fmt.Errorf("starting the host marker process: %w", err)
	}
	h.defer_(func() { _ = marker.Process.Kill(); _ = marker.Wait() })
	// Give the kernel a moment to have the command line in place.
	waitFor(ctx, 2*time.Second, func() bool { return readHost(fmt.Sprintf("/proc/%d/cmdline", marker.Process.Pid)) != "" })
	if !strings.Contains(readHost(fmt.Sprintf("/proc/%d/cmdline", marker.Process.Pid)), "hostmark-"+tok) {
		return errors.New("the host marker process is not visible on the host itself")
	}
	o := h.Probe(ctx, nil, "echo", "alive", sep, "try", "ps", tok)
	if err := ran("probe", o, "alive"); err != nil {
		return err
	}
	if bytes.Contains(o.Stdout, []byte("seen:")) {
		return fmt.Errorf("a host process (pid %d on the host) is in the sandbox's process table: %s", marker.Process.Pid, o)
	}
	return nil
}
