//go:build !unix

package inputfile

import "os"

const openFlags = os.O_RDONLY
