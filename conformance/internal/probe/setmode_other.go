//go:build !linux

package probe

// SetModeRoutes are the routes setmode knows on this OS.
func SetModeRoutes() []string { return setModeRoutes }
