//go:build !windows

package appcontainer

import (
	"context"
	"errors"
	"os"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// errNotWindows is what every tier reports off Windows.
func errNotWindows() error {
	return errors.New("AppContainer, restricted tokens and Job Objects exist only on Windows")
}

type stubPlatform struct{}

func osPlatform() Platform { return stubPlatform{} }

func (stubPlatform) Probe(context.Context, Tier) error { return errNotWindows() }

func (stubPlatform) Launch(_ context.Context, t Tier, _ Launch, _ driverapi.Streams) (driverapi.Exit, error) {
	return driverapi.Exit{}, &SetupError{Tier: t, Step: "platform", Err: errNotWindows()}
}

func (stubPlatform) IsFile(p string) bool { return false }

// osFS off Windows still answers, so a dry plan can be made anywhere.
type osFS struct{}

func (osFS) Lstat(p string) (FileInfo, error) {
	fi, err := os.Lstat(p)
	if errors.Is(err, os.ErrNotExist) {
		return FileInfo{}, nil
	}
	if err != nil {
		return FileInfo{}, err
	}
	return FileInfo{Exists: true, IsDir: fi.IsDir(), Reparse: fi.Mode()&os.ModeSymlink != 0}, nil
}
