// Package inputfile reads the files a user names as input (configuration
// and the like) with bounds: only a regular file, and only up to a size
// limit. A path naming /dev/zero, a FIFO or a terminal would otherwise make
// a plain read never end (or block for ever on open), and a huge file would
// be read into memory whole.
package inputfile

import (
	"fmt"
	"io"
	"io/fs"
	"os"
)

// NotRegularError is a path that names something other than a regular file.
type NotRegularError struct {
	Path string
	Kind string // "a directory", "a FIFO (named pipe)", "a character device", ...
}

func (e *NotRegularError) Error() string {
	return fmt.Sprintf("%s is %s, not a regular file", e.Path, e.Kind)
}

// TooLargeError is a file above the size limit.
type TooLargeError struct {
	Path  string
	Limit int64
}

func (e *TooLargeError) Error() string {
	return fmt.Sprintf("%s is larger than the %d byte limit", e.Path, e.Limit)
}

// Read returns the content of the regular file at path, refusing anything
// else and anything longer than limit bytes. The file is opened without
// blocking (a FIFO swapped in after a check cannot hang the open) and
// checked again once open, so what is read is what was checked.
func Read(path string, limit int64) ([]byte, error) {
	if st, err := os.Stat(path); err != nil {
		return nil, err
	} else if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Kind: Kind(st.Mode())}
	}
	f, err := os.OpenFile(path, openFlags, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, &NotRegularError{Path: path, Kind: Kind(st.Mode())}
	}
	if st.Size() > limit {
		return nil, &TooLargeError{Path: path, Limit: limit}
	}
	// The size can change while reading: the limit bounds the read itself.
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > limit {
		return nil, &TooLargeError{Path: path, Limit: limit}
	}
	return data, nil
}

// Kind names a file mode's type for an error message.
func Kind(m fs.FileMode) string {
	switch {
	case m.IsRegular():
		return "a regular file"
	case m.IsDir():
		return "a directory"
	case m&fs.ModeNamedPipe != 0:
		return "a FIFO (named pipe)"
	case m&fs.ModeSocket != 0:
		return "a socket"
	case m&fs.ModeCharDevice != 0:
		return "a character device"
	case m&fs.ModeDevice != 0:
		return "a block device"
	case m&fs.ModeSymlink != 0:
		return "a symbolic link"
	}
	return "not a regular file"
}
