package bwrap

import (
	"fmt"
	"strconv"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// minTmpfsBytes is the smallest tmpfs budget a plan may carry: the
// smallest memory limit (1 MiB).
const minTmpfsBytes = 1 << 20

// tmpfsBudget is what a command's writable tmpfs mounts (/tmp and
// /dev/shm) may hold together: max, and never more than the memory limit
// when there is one. tmpfs pages are charged to the command's memory
// cgroup, but RLIMIT_AS does not see them, and without a cgroup nothing
// else bounds them.
func tmpfsBudget(max, memoryBytes uint64) uint64 {
	if memoryBytes > 0 && memoryBytes < max {
		return memoryBytes
	}
	return max
}

// tmpfsSizes splits a budget between /tmp (three quarters) and /dev/shm
// (one quarter, as much as runtimes that share memory through it ask of a
// container's /dev/shm), both whole 4 KiB pages so that their sum, as the
// kernel rounds it, stays within the budget.
func tmpfsSizes(budget uint64) (tmp, shm uint64) {
	const page = 4096
	shm = (budget / 4) &^ (page - 1)
	tmp = (budget - shm) &^ (page - 1)
	return tmp, shm
}

// tmpfsTotal is the plan's tmpfs budget; a plan built before the field existed
// (zero) gets the default bound, never none.
func (p launchPlan) tmpfsTotal() uint64 {
	if p.TmpfsBytes == 0 {
		return tmpfsBudget(defaultTmpfsMaxMB<<20, p.MemoryBytes)
	}
	return p.TmpfsBytes
}

// tmpArgs mounts the private /tmp with its share of the budget (bwrap
// 0.8's --size applies to the next --tmpfs).
func (p launchPlan) tmpArgs() []string {
	tmp, _ := tmpfsSizes(p.tmpfsTotal())
	return []string{"--size", strconv.FormatUint(tmp, 10), "--tmpfs", "/tmp"}
}

// devArgs follow --dev /dev. bwrap's /dev is a tmpfs of the kernel's
// default size (half of RAM) that --size cannot reach, so it is made
// read-only once set up: the device nodes in it (null, zero, full, random,
// urandom, tty) are bind mounts and keep working, /dev/pts is devpts.
// /dev/shm, the one place programs write to, becomes a tmpfs of its own
// with the rest of the budget, mounted before /dev turns read-only.
func (p launchPlan) devArgs() []string {
	_, shm := tmpfsSizes(p.tmpfsTotal())
	return []string{
		"--size", strconv.FormatUint(shm, 10), "--tmpfs", "/dev/shm",
		"--remount-ro", "/dev",
	}
}

// checkTmpfs validates a decoded plan's tmpfs budget.
func (p launchPlan) checkTmpfs() error {
	switch {
	case p.TmpfsBytes < minTmpfsBytes || p.TmpfsBytes > maxTmpfsMaxMB<<20:
		return &driverapi.ProfileError{Reason: fmt.Sprintf("plan: tmpfs_bytes %d is outside %d..%d", p.TmpfsBytes, uint64(minTmpfsBytes), uint64(maxTmpfsMaxMB<<20))}
	case p.MemoryBytes > 0 && p.TmpfsBytes > p.MemoryBytes:
		return &driverapi.ProfileError{Reason: fmt.Sprintf("plan: tmpfs_bytes %d is above the memory limit %d", p.TmpfsBytes, p.MemoryBytes)}
	}
	return nil
}
