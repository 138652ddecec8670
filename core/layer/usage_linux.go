//go:build linux

package layer

import (
	"context"
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// UpperBytes is the disk the layer's upper directory holds: the blocks
// allocated to every entry in it (512-byte units, as du counts), read by
// descriptor without following links. Its cost grows with the upper
// layer, not the workspace. Entries a command removes while it runs are
// skipped.
func (l *Layer) UpperBytes(ctx context.Context) (int64, error) {
	fd, err := unix.Open(l.dir+"/"+UpperDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return 0, &LayerError{Dir: l.dir, Reason: "the upper directory cannot be opened", Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return 0, &LayerError{Dir: l.dir, Reason: "the upper directory cannot be read", Err: err}
	}
	n, err := dirBytes(ctx, fd)
	return n + st.Blocks*512, err
}

// Unused reports whether the layer's upper directory is empty: no command
// or view wrote, removed or renamed anything through the overlay (a
// removal leaves a whiteout there, a change of metadata a copy-up).
func (l *Layer) Unused() (bool, error) {
	fd, err := unix.Open(l.dir+"/"+UpperDir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, &LayerError{Dir: l.dir, Reason: "the upper directory cannot be opened", Err: err}
	}
	f := os.NewFile(uintptr(fd), "upper")
	defer f.Close()
	names, err := f.Readdirnames(1)
	if len(names) > 0 {
		return false, nil
	}
	if err != nil && !errors.Is(err, io.EOF) {
		return false, &LayerError{Dir: l.dir, Reason: "the upper directory cannot be read", Err: err}
	}
	return true, nil
}

// dirBytes sums the blocks below the directory fd (which it closes).
func dirBytes(ctx context.Context, fd int) (int64, error) {
	f := os.NewFile(uintptr(fd), "upper")
	defer f.Close()
	var total int64
	for {
		if err := ctx.Err(); err != nil {
			return total, err
		}
		names, err := f.Readdirnames(1024)
		for _, name := range names {
			var st unix.Stat_t
			if unix.Fstatat(fd, name, &st, unix.AT_SYMLINK_NOFOLLOW) != nil {
				continue
			}
			total += st.Blocks * 512
			if st.Mode&unix.S_IFMT == unix.S_IFDIR {
				sub, err := unix.Openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
				if err != nil {
					continue
				}
				n, err := dirBytes(ctx, sub)
				total += n
				if err != nil {
					return total, err
				}
			}
		}
		if err != nil || len(names) == 0 {
			return total, nil
		}
	}
}
