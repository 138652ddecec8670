//go:build !linux

package main

import "net"

// checkServiceOwner is Linux's (SO_PEERCRED); serve runs on Linux only.
func checkServiceOwner(net.Conn, string) error { return nil }

// describeService is Linux's (SO_PEERCRED); serve runs on Linux only.
func describeService(string) (string, error) { return "", nil }
