//go:build !linux

package main

import (
	"context"
	"os/exec"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// rawRunner has no raw baseline off Linux: the raw figure is bubblewrap's.
func rawRunner(ctx context.Context, cfg core.Config, cmd core.Command) (way, minimal benchWay, stop func(), err error) {
	return nil, nil, func() {}, nil
}

// tieToBench: no parent-death signal off Linux; bench's own cleanup stops
// what it started.
func tieToBench(*exec.Cmd) {}

// processIdentity: not known off Linux, so bench sweeps nothing there.
func processIdentity(int) (string, bool) { return "", false }

func processIdentityOf(string) (string, bool) { return "", false }

func ownedByMe(string) bool { return false }
