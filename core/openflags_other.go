//go:build !unix

package core

// nonBlockingOpen: opening a file never waits for a reader here.
const nonBlockingOpen = 0
