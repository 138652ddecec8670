// Package scripts holds the tests of the shell scripts and Makefile targets
// in this directory (bench_test.go); it has no code of its own.
package scripts
