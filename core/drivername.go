package core

import (
	"fmt"
	"path/filepath"
	"strings"
)

// DriverName is the name a driver binary goes by: its base name without
// ".exe" and the "aleph-driver-" prefix (/opt/x/aleph-driver-runc is
// "runc", FindDriver's inverse). Its configuration section, unless it is
// one of this project's drivers, is [sandbox.drivers.NAME].
func DriverName(path string) string {
	base := strings.TrimSuffix(filepath.Base(path), ".exe")
	return strings.TrimPrefix(base, "aleph-driver-")
}

// SectionKey is the configuration key of the section Config.DriverSection
// gives for name: "sandbox.linux" and "sandbox.windows" for the platform
// sections, "sandbox.drivers.NAME" for any other.
func SectionKey(name string) string {
	switch name {
	case "linux", "windows":
		return "sandbox." + name
	}
	return "sandbox.drivers." + name
}

// ShippedBackend reports whether backend is one of the drivers this
// project ships, whose sections are the platform ones (Options): asking
// them their schema would cost every start a call to learn what is known.
func ShippedBackend(backend string) bool {
	switch backend {
	case "bwrap", "seatbelt", "appcontainer":
		return true
	}
	return false
}

// DriverNotFoundError lists where a driver binary was looked for (pluginhost.FindDriver).
type DriverNotFoundError struct {
	Name   string
	Binary string
	Looked []string
}

func (e *DriverNotFoundError) Error() string {
	if len(e.Looked) == 0 {
		return fmt.Sprintf("driver %q not found: no place to look for %s", e.Name, e.Binary)
	}
	return fmt.Sprintf("driver %q not found: looked for %s in %s", e.Name, e.Binary, strings.Join(e.Looked, ", "))
}
