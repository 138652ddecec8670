//go:build !(linux && amd64)

package int80test

// Supported reports whether Getpid32 can be called on this platform.
const Supported = false

// Getpid32 is unavailable off linux/amd64.
func Getpid32() uintptr { panic("int80test: not linux/amd64") }
