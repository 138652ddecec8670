//go:build !linux && !darwin

package probe

import "errors"

var errNoTTYProbe = errors.New("the terminal steps exist only on Linux and macOS")

func (p *prober) tty() error { return errNoTTYProbe }

func (p *prober) ctty([]string) error { return errNoTTYProbe }
