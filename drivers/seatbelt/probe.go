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

// probeRlimitAS starts the shim with a 1 GiB RLIMIT_AS around /usr/bin/true
// and reports whether the limit could be set and the program still ran.
// Capabilities claims memory_limit only when it could.
func (d *Driver) probeRlimitAS(ctx context.Context) error {
	if len(d.cfg.Shim) == 0 {
		return errors.New("cannot find this executable to re-run it as the RLIMIT_AS shim")
	}
	var errBuf bytes.Buffer
	exit, err := runProcess(ctx, processSpec{
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
