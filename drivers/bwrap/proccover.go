package bwrap

import "os"

// The sandbox gets a /proc of its own (bwrap --proc), but a procfs mount
// shows more than the processes of its PID namespace: the sysctls, a few
// writable kernel triggers and several files that describe the whole host.
// With Landlock the sandbox could not write any of it; without Landlock
// (older kernels, Landlock not in the LSM list) a root driver's sandbox runs
// as uid 0 without capabilities, which still passes the permission check of
// every 0644 sysctl: `echo "|/workspace/p" > /proc/sys/kernel/core_pattern`
// and a crash ran a payload on the host as root. So /proc is made safe by
// mounts alone, whatever Landlock does. The lists are the OCI runtime
// spec's defaults (runc's, plus /proc/asound and /proc/interrupts, which
// newer runtimes mask too). /sys is not mounted in the sandbox at all, so
// the spec's /sys/firmware has nothing to cover.

// procReadOnly are made read-only: bound read-only onto themselves.
// bwrap covers sys, sysrq-trigger, irq and bus itself only where its access
// check says they are writable, and the check on the /proc/sys directory
// (mode 0555) says no even where the files in it are writable.
func procReadOnly() []string {
	return []string{"/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs"}
}

// procMasked are hidden: a file is covered by /dev/null (mounted nodev, so
// opening it fails), a directory by an empty read-only tmpfs.
func procMasked() []string {
	return []string{"/proc/kcore", "/proc/keys", "/proc/timer_list", "/proc/sched_debug",
		"/proc/latency_stats", "/proc/timer_stats", "/proc/acpi", "/proc/scsi", "/proc/asound",
		"/proc/interrupts"}
}

// maskTmpfsSize bounds each masking tmpfs: they are empty and read-only,
// one page is all they could ever hold.
const maskTmpfsSize = "4096"

// procCoverArgs is the bwrap argv that follows `--proc /proc` and covers
// the entries above. bwrap fails on a missing mount target, and which of
// them exist depends on the kernel's configuration, so only the entries
// present in the host's /proc are covered (the sandbox's procfs has the
// same ones: same kernel). The sources are the host's: bwrap resolves bind
// sources outside the new root, and a sysctl file acts on the namespaces of
// whoever opens it, not on the procfs instance it was reached through.
func procCoverArgs() []string {
	var args []string
	for _, p := range procReadOnly() {
		if _, err := os.Lstat(p); err == nil {
			args = append(args, "--ro-bind", p, p)
		}
	}
	for _, p := range procMasked() {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.IsDir():
			args = append(args, "--size", maskTmpfsSize, "--tmpfs", p, "--remount-ro", p)
		default:
			args = append(args, "--ro-bind", "/dev/null", p)
		}
	}
	return args
}
