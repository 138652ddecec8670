package int80test

import (
	"errors"
	"runtime"
	"runtime/debug"
)

// ErrNoIA32 reports that the i386 entry point faulted instead of running the
// system call: the kernel was built or booted without IA32 emulation
// (CONFIG_IA32_EMULATION off, or ia32_emulation=0 on the command line), so
// `int 0x80` raises a general protection fault that arrives as SIGSEGV.
// On such a host no 32-bit syscall can reach seccomp at all.
var ErrNoIA32 = errors.New("int 0x80 faults with SIGSEGV: the kernel has no IA32 emulation (ia32_emulation=0 or CONFIG_IA32_EMULATION off)")

// Probe calls Getpid32 and reports a fault as ErrNoIA32 instead of letting
// the Go runtime die of it. The runtime turns a SIGSEGV in Go or assembly
// code into a fatal "unexpected fault address" unless the goroutine asked
// for a panic on fault, which can be recovered: that is what separates "this
// host cannot make 32-bit syscalls" from "the filter killed the call".
// Off linux/amd64 it returns an error without trying.
func Probe() (pid uintptr, err error) {
	if !Supported {
		return 0, errors.New("int80test: the int 0x80 probe needs linux/amd64")
	}
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		if _, fault := r.(runtime.Error); !fault {
			panic(r)
		}
		pid, err = 0, ErrNoIA32
	}()
	return Getpid32(), nil
}
