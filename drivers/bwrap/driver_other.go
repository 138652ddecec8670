//go:build !linux

package bwrap

import (
	"errors"

	"github.com/hashicorp/go-hclog"
)

// Config configures a Driver (Linux only).
type Config struct {
	Options      Options
	InitBinary   string
	DriverBinary string
	CgroupRoot   string
	SelfCgroup   string
	Logger       hclog.Logger
}

// ErrUnsupported is returned by New off Linux.
var ErrUnsupported = errors.New("the bwrap driver runs only on linux")

// Driver exists off Linux only so that callers compile; New refuses.
type Driver struct{}

// New refuses off Linux.
func New(Config) (*Driver, error) { return nil, ErrUnsupported }

// NewFromEnv refuses off Linux.
func NewFromEnv(hclog.Logger) (*Driver, error) { return nil, ErrUnsupported }

// Prepare does nothing off Linux.
func (d *Driver) Prepare() {}
