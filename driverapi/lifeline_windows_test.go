//go:build windows

package driverapi_test

// hostMain has no counterpart on Windows: there is no lifeline pipe there.
func hostMain() {}
