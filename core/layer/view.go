package layer

import (
	"errors"
	"os"
)

// ErrLayerBusy: the layer's overlay is mounted by another process (a
// session sandbox this process cannot reach), so it cannot be mounted
// here as well.
var ErrLayerBusy = errors.New("the layer's overlay is mounted by another process")

// View is the layer's overlay mounted by this process for the host's own
// file operations (MountView). Dir is the overlay's root; Close releases
// it.
type View struct {
	Dir         *os.File
	lock, upper *os.File
}

// Close closes the view's root and lets others mount the layer again.
func (v *View) Close() error {
	if v == nil || v.Dir == nil {
		return nil
	}
	err := v.Dir.Close()
	v.Dir = nil
	// The upper's exclusive lock goes last: once it is released a session
	// sandbox may mount the upper, and this view's overlay is gone by then
	// (its last descriptor closed above).
	v.upper.Close()
	v.lock.Close()
	return err
}
