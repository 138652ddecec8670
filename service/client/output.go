package client

import (
	"bytes"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// Output assembles a command's output on the client side of
// Execute: the service sends each byte once, as an output chunk, and its
// result carries only what it could not stream (output_streamed).
type Output struct {
	stdout, stderr bytes.Buffer
}

// Add keeps one chunk.
func (o *Output) Add(c *hostv1.OutputChunk) {
	if c.GetStream() == hostv1.OutputChunk_STREAM_STDERR {
		o.stderr.Write(c.GetData())
		return
	}
	o.stdout.Write(c.GetData())
}

// Whole is the command's output: the chunks and then the rest the result
// carries. A service older than output_streamed repeated the whole output
// in its result: that is then the output.
func (o *Output) Whole(res *hostv1.ExecResult) (stdout, stderr []byte) {
	if !res.GetOutputStreamed() {
		return res.GetStdout(), res.GetStderr()
	}
	return append(o.stdout.Bytes(), res.GetStdout()...), append(o.stderr.Bytes(), res.GetStderr()...)
}
