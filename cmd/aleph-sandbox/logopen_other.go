//go:build !unix

package main

const logOpenFlags = 0
