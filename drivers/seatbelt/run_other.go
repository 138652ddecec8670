//go:build !unix

package seatbelt

import (
	"context"
	"errors"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func runProcess(context.Context, processSpec, driverapi.Streams) (driverapi.Exit, error) {
	return driverapi.Exit{}, errors.New("seatbelt: sandbox-exec exists only on macOS")
}
