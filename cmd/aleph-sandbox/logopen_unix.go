//go:build unix

package main

import "syscall"

// logOpenFlags: O_NONBLOCK makes opening a FIFO without a reader fail
// (ENXIO) instead of waiting for one.
const logOpenFlags = syscall.O_NONBLOCK
