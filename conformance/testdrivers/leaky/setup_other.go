//go:build !(linux && amd64)

package main

import "errors"

func setupAndExec(uint64, string, string, []string) error {
	return errors.New("limits are set only on Linux/amd64")
}
