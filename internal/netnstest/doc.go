// Package netnstest builds network-namespace test hosts (Linux only; on
// other systems the package is empty).
package netnstest
