//go:build linux

package sandboxinit

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// Precompiled seccomp programs (InitSpec.SeccompFD).
//
// Building the filters (go-seccomp-bpf's policy, the prefixes) takes a
// fraction of a millisecond; sandbox-init did it in every command, twice
// where the supervisor's child re-execs it (the no-spawn case). The
// launcher builds them once instead and hands them over on a sealed memfd:
// the program the target runs under, then the supervisor's (the same with
// fork allowed). They depend only on PrecompileKey's fields, so one memfd
// serves every command with the same key.
//
// Trust: the programs come from the launcher, which chooses the policy
// anyway (it writes the InitSpec). The memfd must be sealed against writes,
// so nothing that holds a copy of the descriptor can change it; it is read
// with pread (the descriptor is shared by concurrent sandboxes) and, like
// every descriptor not in InheritFDs, never reaches the target.

// programsMagic starts the encoding.
const programsMagic = "ALEPHBPF1\x00"

// PrecompileKey is what the programs of s depend on: specs with equal keys
// have equal programs.
type PrecompileKey struct {
	SocketMode   SocketMode
	AllowSpawn   bool
	NoNamespaces bool
	BridgePorts  string
	// SpawnNotified: the fork rules are the notification filter's
	// (notify_linux.go), not the target program's.
	SpawnNotified bool
	// UnixGuarded: the target may have unix sockets of its own, their
	// connects and sends the notification filter's (unixsock_linux.go).
	UnixGuarded bool
	// DenyNotified: the denylist is the notification filter's
	// (notify_linux.go), the target's program notifies it too.
	DenyNotified bool
}

// KeyOf is s's PrecompileKey.
func KeyOf(s InitSpec) PrecompileKey {
	return PrecompileKey{SocketMode: s.SocketMode, AllowSpawn: s.AllowSpawn, NoNamespaces: s.NoNamespaces,
		BridgePorts: fmt.Sprint(s.BridgePorts), SpawnNotified: spawnNotified(&s), UnixGuarded: unixGuarded(&s),
		DenyNotified: denyNotified(&s)}
}

// PrecompiledPrograms encodes s's programs for InitSpec.SeccompFD: the
// target's (guardedProgram of s), then the supervisor's.
func PrecompiledPrograms(s InitSpec) ([]byte, error) {
	target, err := guardedProgram(&s)
	if err != nil {
		return nil, err
	}
	sup := supervisorSpec(&s)
	supervisor, err := guardedProgram(&sup)
	if err != nil {
		return nil, err
	}
	var b bytes.Buffer
	b.WriteString(programsMagic)
	for _, prog := range [][]bpf.Instruction{target, supervisor} {
		raw, err := bpf.Assemble(prog)
		if err != nil {
			return nil, fmt.Errorf("seccomp: %w", err)
		}
		_ = binary.Write(&b, binary.LittleEndian, uint32(len(raw)))
		for _, r := range raw {
			_ = binary.Write(&b, binary.LittleEndian, unix.SockFilter{Code: r.Op, Jt: r.Jt, Jf: r.Jf, K: r.K})
		}
	}
	return b.Bytes(), nil
}

// maxProgramsBytes bounds what is read from SeccompFD.
const maxProgramsBytes = len(programsMagic) + 2*(4+8*unix.BPF_MAXINSNS)

// readPrograms reads the two programs from fd (see PrecompiledPrograms).
func readPrograms(fd int) (target, supervisor []bpf.Instruction, err error) {
	seals, err := unix.FcntlInt(uintptr(fd), unix.F_GET_SEALS, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("seccomp fd %d: %w", fd, err)
	}
	if seals&unix.F_SEAL_WRITE == 0 || seals&unix.F_SEAL_GROW == 0 || seals&unix.F_SEAL_SHRINK == 0 {
		return nil, nil, fmt.Errorf("seccomp fd %d: not sealed", fd)
	}
	// pread, not an *os.File: a File's finalizer would close the
	// descriptor, which the plain child still needs (and the launcher's
	// tests share).
	buf := make([]byte, maxProgramsBytes+1)
	n := 0
	for n < len(buf) {
		m, err := unix.Pread(fd, buf[n:], int64(n))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return nil, nil, fmt.Errorf("seccomp fd %d: %w", fd, err)
		}
		if m == 0 {
			break
		}
		n += m
	}
	data := buf[:n]
	rest, ok := bytes.CutPrefix(data, []byte(programsMagic))
	if !ok {
		return nil, nil, fmt.Errorf("seccomp fd %d: not a program set", fd)
	}
	var progs [2][]bpf.Instruction
	for i := range progs {
		if len(rest) < 4 {
			return nil, nil, fmt.Errorf("seccomp fd %d: truncated", fd)
		}
		n := int(binary.LittleEndian.Uint32(rest))
		rest = rest[4:]
		if n < 1 || n > unix.BPF_MAXINSNS || len(rest) < 8*n {
			return nil, nil, fmt.Errorf("seccomp fd %d: program of %d instructions", fd, n)
		}
		for j := 0; j < n; j++ {
			r := rest[8*j:]
			progs[i] = append(progs[i], bpf.RawInstruction{Op: binary.LittleEndian.Uint16(r), Jt: r[2], Jf: r[3],
				K: binary.LittleEndian.Uint32(r[4:])})
		}
		rest = rest[8*n:]
	}
	if len(rest) != 0 {
		return nil, nil, fmt.Errorf("seccomp fd %d: trailing data", fd)
	}
	return progs[0], progs[1], nil
}

// initProgram is the program sandbox-init loads on itself for spec: the
// supervisor's when it supervises, else the target's; read from SeccompFD
// when the launcher precompiled them, else built here.
func initProgram(spec *InitSpec) ([]bpf.Instruction, error) {
	if spec.SeccompFD > 0 {
		target, supervisor, err := readPrograms(spec.SeccompFD)
		if err != nil {
			return nil, err
		}
		if spec.Supervise {
			return supervisor, nil
		}
		return target, nil
	}
	if spec.Supervise {
		sup := supervisorSpec(spec)
		return guardedProgram(&sup)
	}
	return guardedProgram(spec)
}

// withSeccompFD is the descriptors the supervisor's plain child keeps open
// besides 0-2 and the command record's: InheritFDs and the programs' memfd
// (which the child marks close-on-exec again, as every descriptor not in
// InheritFDs).
func withSeccompFD(spec *InitSpec) []int {
	if spec.SeccompFD == 0 {
		return spec.InheritFDs
	}
	return append(append([]int(nil), spec.InheritFDs...), spec.SeccompFD)
}
