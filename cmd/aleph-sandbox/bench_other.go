//go:build !linux

package main

import (
	"context"

	"github.com/aleph-sandbox/aleph-sandbox/core"
)

// rawRunner has no raw baseline off Linux: the raw figure is bubblewrap's.
func rawRunner(ctx context.Context, cfg core.Config, cmd core.Command, minimal bool) (benchWay, func(), error) {
	return nil, func() {}, nil
}
