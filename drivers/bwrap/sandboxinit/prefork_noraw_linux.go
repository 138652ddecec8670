//go:build linux && !(amd64 || arm64)

package sandboxinit

import "syscall"

// rawForkArch: not written for this architecture; prepared sandboxes fork
// their child at the hand-over.
const rawForkArch = false

func forkWaiting(*waitPlan) (int, syscall.Errno) { return 0, syscall.ENOSYS }

func forkSession(*nsPlan) (int, syscall.Errno) { return 0, syscall.ENOSYS }
