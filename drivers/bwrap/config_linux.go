//go:build linux

package bwrap

import (
	"bytes"
	"context"
	"encoding/json"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// ConfigSchema implements driverapi.Configurable.
func (d *Driver) ConfigSchema(ctx context.Context) (driverapi.ConfigSchema, error) {
	if err := ctx.Err(); err != nil {
		return driverapi.ConfigSchema{}, err
	}
	return schema(), nil
}

// SetConfig implements driverapi.Configurable. The host hands the driver
// its section at launch too (optionsEnv), so the host probe can start before
// the handshake; SetConfig is where a refused section becomes a typed error
// naming its key. A section that differs from the one the process started
// with is refused rather than half applied: the probe already ran on it.
func (d *Driver) SetConfig(ctx context.Context, configJSON []byte) error {
	d.trace.Mark("SetConfig")
	if err := ctx.Err(); err != nil {
		return err
	}
	o, err := validateConfig(configJSON)
	if err != nil {
		return err
	}
	if d.optErr != nil {
		return toConfigError(d.optErr)
	}
	cur, _ := json.Marshal(d.cfg.Options)
	next, _ := json.Marshal(o)
	if !bytes.Equal(cur, next) {
		return &driverapi.ConfigError{Section: configSection,
			Reason: "differs from the section this driver process was started with (" + optionsEnv + "); start the driver with the section instead"}
	}
	return nil
}
