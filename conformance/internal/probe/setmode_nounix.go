//go:build !unix

package probe

import "errors"

// Windows has no set-id bits: fs/no-setid-files is POSIX's.
func SetModeRoutes() []string { return nil }

func setModeRoute(string, uint32, string) error {
	return errors.New("set-id modes do not exist on this system")
}
