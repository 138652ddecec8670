package seatbelt

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// probeMemoryBytes is the RLIMIT_AS the probe sets: low enough to be a
// real limit, high enough for /usr/bin/true to start.
const probeMemoryBytes = 1 << 30

// probeRlimitAS checks two things through the shim, and Capabilities
// claims memory_limit only when both hold: that RLIMIT_AS really stops an
// allocation larger than the limit (allocationProbe: a kernel may accept
// the limit and not enforce it), and that /usr/bin/true still starts
// under a 1 GiB limit through the real launch path.
func (d *Driver) probeRlimitAS(ctx context.Context) error {
	if len(d.cfg.Shim) == 0 {
		return errors.New("cannot find this executable to re-run it as the RLIMIT_AS shim")
	}
	var probeErr bytes.Buffer
	exit, err := runProcess(ctx, processSpec{
		argv:     ProbeArgv(d.cfg.Shim, probeMemoryBytes),
		env:      []string{},
		dir:      "/",
		timeout:  10 * time.Second,
		budget:   8192,
		withShim: true,
	}, driverapi.Streams{Stderr: &probeErr})
	if err != nil {
		return err
	}
	if exit.ExitCode != 0 {
		return fmt.Errorf("allocation probe exited %d: %s", exit.ExitCode, bytes.TrimSpace(probeErr.Bytes()))
	}
	var errBuf bytes.Buffer
	exit, err = runProcess(ctx, processSpec{
		argv:     ShimArgv(d.cfg.Shim, probeMemoryBytes, []string{"/usr/bin/true"}),
		env:      []string{},
		dir:      "/",
		timeout:  10 * time.Second,
		budget:   8192,
		withShim: true,
	}, driverapi.Streams{Stderr: &errBuf})
	if err != nil {
		return err
	}
	if exit.ExitCode != 0 {
		return fmt.Errorf("/usr/bin/true under a %d byte RLIMIT_AS exited %d: %s", probeMemoryBytes, exit.ExitCode, bytes.TrimSpace(errBuf.Bytes()))
	}
	return nil
}
