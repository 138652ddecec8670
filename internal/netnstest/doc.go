// Package netnstest holds the network fixtures of the tests: listeners
// that greet or echo (any system), and network-namespace test hosts
// (Linux only).
package netnstest
