//go:build !linux

package bwrap

import (
	"errors"

	"github.com/hashicorp/go-hclog"
)

// errUnsupported is returned by NewFromEnv off Linux.
var errUnsupported = errors.New("the bwrap driver runs only on linux")

// Driver exists off Linux only so that callers compile; NewFromEnv refuses.
type Driver struct{}

// NewFromEnv refuses off Linux.
func NewFromEnv(hclog.Logger) (*Driver, error) { return nil, errUnsupported }

// Prepare does nothing off Linux.
func (d *Driver) Prepare() {}
