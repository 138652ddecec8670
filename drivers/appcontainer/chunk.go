package appcontainer

import (
	"io"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// chunkWriter splits writes so no single write to the stream exceeds
// driverapi.MaxOutputChunk (one output event on the wire).
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(p []byte) (int, error) {
	n := 0
	for len(p) > 0 {
		k := min(len(p), driverapi.MaxOutputChunk)
		m, err := c.w.Write(p[:k])
		n += m
		if err != nil {
			return n, err
		}
		p = p[k:]
	}
	return n, nil
}
