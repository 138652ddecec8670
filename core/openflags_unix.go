//go:build unix

package core

import "syscall"

// nonBlockingOpen makes opening a FIFO without a reader fail (ENXIO)
// instead of waiting for one; on a regular file it changes nothing.
const nonBlockingOpen = syscall.O_NONBLOCK
