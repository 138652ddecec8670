//go:build linux

package bwrap

import (
	"fmt"
	"os"
	"sync"

	"github.com/hashicorp/go-hclog"
	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

// seccompPrograms are the seccomp programs the driver built, one sealed
// memfd per sandboxinit.PrecompileKey, kept for the driver's lifetime and
// passed to every sandbox-init with that key (initSpec.SeccompFD): each
// sandbox-init then loads them instead of building its own
// (sandboxinit/precompiled_linux.go).
type seccompPrograms struct {
	mu    sync.Mutex
	files map[sandboxinit.PrecompileKey]*os.File
}

// get returns the memfd for s's programs, building it on first use; nil
// (sandbox-init then builds them itself) when that fails.
func (sp *seccompPrograms) get(s initSpec, lg hclog.Logger) *os.File {
	key := sandboxinit.KeyOf(s)
	sp.mu.Lock()
	defer sp.mu.Unlock()
	if f := sp.files[key]; f != nil {
		return f
	}
	f, err := programsMemfd(s)
	if err != nil {
		lg.Warn("seccomp programs not precompiled; sandbox-init builds them", "error", err)
		return nil
	}
	if sp.files == nil {
		sp.files = map[sandboxinit.PrecompileKey]*os.File{}
	}
	sp.files[key] = f
	return f
}

func programsMemfd(s initSpec) (*os.File, error) {
	data, err := sandboxinit.PrecompiledPrograms(s)
	if err != nil {
		return nil, err
	}
	fd, err := unix.MemfdCreate("aleph-seccomp", unix.MFD_CLOEXEC|unix.MFD_ALLOW_SEALING)
	if err != nil {
		return nil, fmt.Errorf("memfd: %w", err)
	}
	f := os.NewFile(uintptr(fd), "aleph-seccomp")
	if _, err := f.Write(data); err != nil {
		f.Close()
		return nil, fmt.Errorf("write programs: %w", err)
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		f.Close()
		return nil, fmt.Errorf("seal programs: %w", err)
	}
	return f, nil
}

// precompiled is the programs' memfd for s, or nil where sandbox-init is
// to build them (the benchmarks' legacy set-up).
func (d *Driver) precompiled(s initSpec) *os.File {
	if d.cfg.legacySetup {
		return nil
	}
	return d.progs.get(s, d.log)
}
