//go:build unix

package inputfile

import "syscall"

// O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer.
const openFlags = syscall.O_RDONLY | syscall.O_NONBLOCK | syscall.O_CLOEXEC
