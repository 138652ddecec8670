//go:build !windows

package appcontainer

import (
	"context"
	"errors"
	"os"
	"path/filepath"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// errNotWindows is what every tier reports off Windows.
func errNotWindows() error {
	return errors.New("AppContainer, restricted tokens and Job Objects exist only on Windows")
}

type stubPlatform struct{}

func osPlatform(string) Platform { return stubPlatform{} }

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

// defaultStateDir off Windows: never used for placeholders (the stub
// below makes none), only so that Config is complete everywhere.
func defaultStateDir() string {
	if d, err := os.UserCacheDir(); err == nil {
		return filepath.Join(d, "aleph-sandbox", "appcontainer-driver")
	}
	return filepath.Join(os.TempDir(), "aleph-sandbox-appcontainer-driver")
}

// stubPlaceholders refuses: nothing runs off Windows, so nothing needs a
// placeholder. Tests give the driver a fake.
type stubPlaceholders struct{}

func osPlaceholders() PlaceholderFS { return stubPlaceholders{} }

func (stubPlaceholders) Create(string) (PlaceholderHold, error) { return nil, errNotWindows() }
func (stubPlaceholders) Hold(string) (PlaceholderHold, error)   { return nil, errNotWindows() }
func (stubPlaceholders) Identify(string) (FileID, error)        { return "", errNotWindows() }
func (stubPlaceholders) Remove(string, FileID, bool) error      { return errNotWindows() }
func (stubPlaceholders) Owner() string                          { return "0-0" }
func (stubPlaceholders) OwnerGone(string) bool                  { return false }
