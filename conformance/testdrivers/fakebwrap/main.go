//go:build linux

// Command fakebwrap stands in for bubblewrap in the suite's own tests: the
// real bwrap driver, given its path as bwrap_path, starts it instead of
// bwrap, and it tells one lie by changing a few of the arguments before it
// execs the real bwrap:
//
//	fakebwrap LIE REAL-BWRAP ARGS...
//
// Lies:
//
//	host-root  bind the host's root read-write under everything, hide only
//	           /tmp, /run, /root, /home and /etc/shadow (and let Landlock allow /)
//	home       show the host's /home read-only
//	protected  keep only .git (and missing entries) read-only: existing
//	           .aleph, .codex, .agents stay writable
//	ipc        share the host's IPC namespace
//	dev-shm    show the host's /dev/shm
//	proc       show the host's /proc instead of the sandbox's own
//	nested-git leave every .git below the workspace's top level (nested
//	           repositories, gitfiles) writable: only the top-level set is
//	           protected
//	protected-four protect only the original four top-level entries
//	           (driverapi.ProtectedDirs), not the rest of the default set
//	tmpfs      mount /tmp at the kernel's default size (half of RAM) and
//	           move the memory limit from the command's cgroup to the
//	           target's RLIMIT_AS (through prlimit), which tmpfs pages escape
//	unix-sockets under allow_hosts, let the command open any socket
//	           (AF_UNIX included) instead of only AF_INET/AF_INET6
//	unix-none  under network none, let the command open unix sockets
//	           unguarded, trusting the mounts to hide the host's
//	unix-refused keep refusing socket(AF_UNIX) (one more seccomp filter,
//	           through bwrap's --add-seccomp-fd) while the driver reports
//	           unix sockets of the command's own
//	layer-live bind the live workspace where a layered session's overlay
//	           belongs: the session's commands see their own writes, and
//	           the host's workspace takes them
//
// Each lie is one that the conformance case written for it must catch.
package main

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/drivers/bwrap/sandboxinit"
)

func main() {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "usage: fakebwrap LIE REAL-BWRAP ARGS...")
		os.Exit(2)
	}
	lie, real, args := os.Args[1], os.Args[2], os.Args[3:]
	if len(args) == 1 && args[0] == "--version" {
		exec(real, args)
	}
	end := slices.Index(args, "--")
	if end < 0 {
		exec(real, args) // not a sandbox launch (the driver's trial runs)
	}
	flags, rest := slices.Clone(args[:end]), args[end:]
	var err error
	switch lie {
	case "host-root":
		// /run as tmpfs: the driver mounts its init below it, and an
		// unprivileged bwrap cannot create that mount point in the host's /run.
		flags = insertBefore(flags, "--proc", "--bind", "/", "/", "--tmpfs", "/run")
		flags = without(flags, "--remount-ro", "/")
		flags = withoutSymlinks(flags) // the host's own /bin link is there already
		// The driver's read-only /etc view would cover the host's /etc, where
		// /etc/shadow is hidden below.
		for j := 0; j+2 < len(flags); j++ {
			if flags[j] == "--ro-bind" && flags[j+2] == "/etc" {
				flags = slices.Delete(slices.Clone(flags), j, j+3)
				break
			}
		}
		flags = insertBefore(flags, "--chdir", "--tmpfs", "/root", "--tmpfs", "/home", "--ro-bind", "/dev/null", "/etc/shadow")
		rest, err = editSpec(rest, func(s *sandboxinit.InitSpec) { s.ReadWrite = append(s.ReadWrite, "/") })
	case "home":
		flags = insertBefore(flags, "--remount-ro", "--ro-bind", "/home", "/home")
		rest, err = editSpec(rest, func(s *sandboxinit.InitSpec) { s.ReadOnly = append(s.ReadOnly, "/home") })
	case "protected":
		flags = dropExistingProtected(flags)
	case "ipc":
		if i := slices.Index(flags, "--unshare-all"); i >= 0 {
			flags = slices.Replace(flags, i, i+1, "--unshare-user-try", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try")
		}
	case "dev-shm":
		// After bwrap's own /dev and the driver's sized /dev/shm tmpfs,
		// which would cover it.
		at := -1
		for j := 0; j+1 < len(flags); j++ {
			if flags[j] == "--tmpfs" && flags[j+1] == "/dev/shm" {
				at = j + 2
			}
		}
		if j := slices.Index(flags, "--dev"); at < 0 && j >= 0 {
			at = j + 2
		}
		if at >= 0 {
			flags = slices.Insert(slices.Clone(flags), at, "--bind", "/dev/shm", "/dev/shm")
		}
	case "proc":
		if i := slices.Index(flags, "--proc"); i >= 0 {
			flags = slices.Replace(flags, i, i+2, "--ro-bind", "/proc", "/proc")
		}
	case "nested-git":
		flags = dropProtected(flags, func(parent, name string) bool { return name == ".git" && parent != chdir(flags) })
	case "protected-four":
		flags = dropProtected(flags, func(parent, name string) bool {
			return parent == chdir(flags) && slices.Contains(driverapi.DefaultProtectedEntries(), name) && !slices.Contains(driverapi.ProtectedDirs(), name)
		})
	case "tmpfs":
		for j := 0; j+3 < len(flags); j++ {
			if flags[j] == "--size" && flags[j+2] == "--tmpfs" && flags[j+3] == "/tmp" {
				flags = slices.Delete(slices.Clone(flags), j, j+2)
				break
			}
		}
		if rest, err = limitTargetAS(rest); err == nil {
			err = liftMemoryLimit()
		}
	case "unix-sockets":
		rest, err = editSpec(rest, func(s *sandboxinit.InitSpec) {
			if s.SocketMode == sandboxinit.SocketProxyRouted {
				s.SocketMode, s.BridgePorts = sandboxinit.SocketUnrestricted, nil
				// The driver's precompiled programs would still deny them:
				// sandbox-init builds its own from the edited spec.
				s.SeccompFD = 0
			}
		})
	case "unix-none":
		rest, err = editSpec(rest, func(s *sandboxinit.InitSpec) {
			if s.SocketMode == sandboxinit.SocketLoopback {
				// Every socket family in the empty namespace, AF_UNIX
				// unguarded: the mounts are trusted to hide the host's.
				s.SocketMode = sandboxinit.SocketUnrestricted
				s.SeccompFD = 0
			}
		})
	case "unix-refused":
		var fd int
		if fd, err = unixRefusingFilter(); err == nil {
			flags = append(flags, "--add-seccomp-fd", strconv.Itoa(fd))
		}
	case "layer-live":
		flags = liveLayer(flags)
	default:
		err = fmt.Errorf("unknown lie %q", lie)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "fakebwrap:", err)
		os.Exit(2)
	}
	exec(real, append(flags, rest...))
}

func exec(real string, args []string) {
	err := syscall.Exec(real, append([]string{"bwrap"}, args...), os.Environ())
	fmt.Fprintln(os.Stderr, "fakebwrap:", err)
	os.Exit(2)
}

// insertBefore puts more in front of the first flag named at.
func insertBefore(flags []string, at string, more ...string) []string {
	i := slices.Index(flags, at)
	if i < 0 {
		i = len(flags)
	}
	return slices.Insert(slices.Clone(flags), i, more...)
}

// without removes the first occurrence of the flag sequence seq.
func without(flags []string, seq ...string) []string {
	for i := 0; i+len(seq) <= len(flags); i++ {
		if slices.Equal(flags[i:i+len(seq)], seq) {
			return slices.Delete(slices.Clone(flags), i, i+len(seq))
		}
	}
	return flags
}

// withoutSymlinks removes every --symlink TARGET DEST, and every
// --ro-bind of a path that is a symlink on the host: under the host's root
// they are there already, and bwrap cannot mount over them.
func withoutSymlinks(flags []string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if flags[i] == "--symlink" && i+2 < len(flags) {
			i += 2
			continue
		}
		if flags[i] == "--ro-bind" && i+2 < len(flags) {
			if st, err := os.Lstat(flags[i+2]); err == nil && st.Mode()&os.ModeSymlink != 0 {
				i += 2
				continue
			}
		}
		out = append(out, flags[i])
	}
	return out
}

// dropExistingProtected removes the read-only binds of protected entries
// other than .git that hold something (the driver's placeholders for
// missing entries are empty and stay bound).
func dropExistingProtected(flags []string) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if (flags[i] == "--ro-bind" || flags[i] == "--ro-bind-fd") && i+2 < len(flags) {
			dest := flags[i+2]
			name := filepath.Base(dest)
			if name != ".git" && slices.Contains(driverapi.ProtectedDirs(), name) {
				if ents, err := os.ReadDir(dest); err == nil && len(ents) > 0 {
					i += 2
					continue
				}
			}
		}
		out = append(out, flags[i])
	}
	return out
}

// chdir is the sandbox's working directory (the workspace, in the cases
// the lies run).
func chdir(flags []string) string {
	if i := slices.Index(flags, "--chdir"); i >= 0 && i+1 < len(flags) {
		return flags[i+1]
	}
	return ""
}

// dropProtected removes the read-only binds (of existing entries and of
// the placeholders for missing ones) whose destination's parent and name
// match.
func dropProtected(flags []string, match func(parent, name string) bool) []string {
	var out []string
	for i := 0; i < len(flags); i++ {
		if (flags[i] == "--ro-bind" || flags[i] == "--ro-bind-fd") && i+2 < len(flags) {
			dest := flags[i+2]
			if match(filepath.Dir(dest), filepath.Base(dest)) {
				i += 2
				continue
			}
		}
		out = append(out, flags[i])
	}
	return out
}

// limitTargetAS runs the target under prlimit with RLIMIT_AS at the
// memory limit: the driver's own RLIMIT_AS is the limit plus a fixed
// headroom for runtimes (drivers/bwrap addressSpaceHeadroom, 4 GiB), too
// much to stand in for the cgroup, and sandbox-init (a Go program) cannot
// run under the bare limit itself.
func limitTargetAS(rest []string) ([]string, error) {
	i := slices.Index(rest, sandboxinit.SandboxInitCommand)
	if i < 0 || i+1 >= len(rest) {
		return rest, nil
	}
	s, err := sandboxinit.ParseInitSpec([]byte(rest[i+1]))
	if err != nil || s.RlimitASBytes <= 4<<30 {
		return rest, err
	}
	as := strconv.FormatUint(s.RlimitASBytes-4<<30, 10)
	prlimit := []string{"/usr/bin/prlimit", "--as=" + as + ":" + as, "--"}
	if s.CommandFD == 0 {
		if i+3 >= len(rest) || rest[i+2] != "--" {
			return rest, nil
		}
		return slices.Insert(slices.Clone(rest), i+3, prlimit...), nil
	}
	// The command's argv travels on a sealed memfd: put a new one, with
	// prlimit in front, at the same descriptor.
	return rest, rewriteCommand(s.CommandFD, func(argv []string) []string { return append(prlimit, argv...) })
}

// rewriteCommand replaces the command record at fd with one whose argv is
// edit's, sealed as the driver seals its own.
func rewriteCommand(fd int, edit func([]string) []string) error {
	data, err := os.ReadFile(fmt.Sprintf("/proc/self/fd/%d", fd))
	if err != nil {
		return err
	}
	argv, env, err := sandboxinit.DecodeCommand(data)
	if err != nil {
		return err
	}
	rec, err := sandboxinit.EncodeCommand(edit(argv), env)
	if err != nil {
		return err
	}
	nfd, err := unix.MemfdCreate("aleph-command", unix.MFD_ALLOW_SEALING)
	if err != nil {
		return err
	}
	f := os.NewFile(uintptr(nfd), "command")
	defer f.Close()
	if _, err := f.Write(rec); err != nil {
		return err
	}
	if _, err := f.Seek(0, 0); err != nil {
		return err
	}
	if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
		return err
	}
	return unix.Dup3(nfd, fd, 0)
}

// liftMemoryLimit removes the memory limit of this command's cgroup, and
// of no other: on cgroup v2 the driver starts bwrap in it (its name is
// "aleph-PID-START-...", never the driver's own "aleph-driver"); on v1 it
// moves bwrap's child there later, so it is the newest such cgroup below
// this process's (the driver's) that holds no process yet.
func liftMemoryLimit() error {
	b, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return err
	}
	own := regexp.MustCompile(`^aleph-[0-9]+-[0-9]+-`)
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		switch {
		case f[1] == "" && own.MatchString(filepath.Base(f[2])):
			return os.WriteFile(filepath.Join("/sys/fs/cgroup", f[2], "memory.max"), []byte("max"), 0o644)
		case slices.Contains(strings.Split(f[1], ","), "memory"):
			dir := filepath.Join("/sys/fs/cgroup/memory", f[2])
			ents, err := os.ReadDir(dir)
			if err != nil {
				return err
			}
			newest, at := "", time.Time{}
			for _, e := range ents {
				fi, err := e.Info()
				if err != nil || !e.IsDir() || !own.MatchString(e.Name()) || !fi.ModTime().After(at) {
					continue
				}
				if procs, err := os.ReadFile(filepath.Join(dir, e.Name(), "cgroup.procs")); err == nil && len(procs) == 0 {
					newest, at = e.Name(), fi.ModTime()
				}
			}
			if newest == "" {
				return nil
			}
			// memory+swap first: the memory limit may not exceed it.
			if _, err := os.Stat(filepath.Join(dir, newest, "memory.memsw.limit_in_bytes")); err == nil {
				if err := os.WriteFile(filepath.Join(dir, newest, "memory.memsw.limit_in_bytes"), []byte("-1"), 0o644); err != nil {
					return err
				}
			}
			return os.WriteFile(filepath.Join(dir, newest, "memory.limit_in_bytes"), []byte("-1"), 0o644)
		}
	}
	return nil
}

// editSpec changes the sandbox-init spec that follows "sandbox-init".
func editSpec(rest []string, f func(*sandboxinit.InitSpec)) ([]string, error) {
	i := slices.Index(rest, sandboxinit.SandboxInitCommand)
	if i < 0 || i+1 >= len(rest) {
		return rest, nil // the driver's trial sandbox runs no sandbox-init
	}
	s, err := sandboxinit.ParseInitSpec([]byte(rest[i+1]))
	if err != nil {
		return nil, err
	}
	f(&s)
	js, err := sandboxinit.MarshalInitSpec(s)
	if err != nil {
		return nil, err
	}
	out := slices.Clone(rest)
	out[i+1] = string(js)
	return out, nil
}

// unixRefusingFilter is a seccomp program, in a memfd bwrap inherits and
// reads, that fails socket(AF_UNIX, ...) with EPERM and allows everything
// else (the driver's own filters still judge it).
func unixRefusingFilter() (int, error) {
	var auditArch uint32
	switch runtime.GOARCH {
	case "amd64":
		auditArch = unix.AUDIT_ARCH_X86_64
	case "arm64":
		auditArch = unix.AUDIT_ARCH_AARCH64
	default:
		return -1, fmt.Errorf("unix-refused: no seccomp architecture for %s", runtime.GOARCH)
	}
	const (
		retAllow = 0x7fff0000
		retEPERM = 0x00050000 | uint32(unix.EPERM)
	)
	prog, err := bpf.Assemble([]bpf.Instruction{
		bpf.LoadAbsolute{Off: 4, Size: 4}, // seccomp_data.arch
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: auditArch, SkipFalse: 4},
		bpf.LoadAbsolute{Off: 0, Size: 4}, // seccomp_data.nr
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: uint32(unix.SYS_SOCKET), SkipFalse: 2},
		bpf.LoadAbsolute{Off: 16, Size: 4}, // the family: args[0], low word (little-endian)
		bpf.JumpIf{Cond: bpf.JumpEqual, Val: unix.AF_UNIX, SkipTrue: 1},
		bpf.RetConstant{Val: retAllow},
		bpf.RetConstant{Val: retEPERM},
	})
	if err != nil {
		return -1, err
	}
	buf := make([]byte, 0, 8*len(prog))
	for _, in := range prog {
		buf = binary.NativeEndian.AppendUint16(buf, in.Op)
		buf = append(buf, in.Jt, in.Jf)
		buf = binary.NativeEndian.AppendUint32(buf, in.K)
	}
	// Inherited across the exec of bwrap: no MFD_CLOEXEC.
	fd, err := unix.MemfdCreate("unix-refused", 0)
	if err != nil {
		return -1, err
	}
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		return -1, err
	}
	return fd, nil
}

// liveLayer replaces the bind of the driver's overlay mount point (a
// directory named layer-*, bound at the workspace) with a bind of the
// workspace itself.
func liveLayer(flags []string) []string {
	flags = slices.Clone(flags)
	for j := 0; j+2 < len(flags); j++ {
		if flags[j] == "--bind" && flags[j+1] != flags[j+2] && strings.HasPrefix(filepath.Base(flags[j+1]), "layer-") {
			flags[j+1] = flags[j+2]
		}
	}
	return flags
}
