package core

import (
	"io"
	"sync"
	"unicode/utf8"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// limitedBuffer keeps the first limit bytes and counts the rest.
type limitedBuffer struct {
	mu        sync.Mutex
	buf       []byte
	limit     int64
	truncated bool
	total     int64 // every byte the driver delivered, kept or not
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.total += int64(len(p))
	room := b.limit - int64(len(b.buf))
	if int64(len(p)) > room {
		b.truncated = true
		if room > 0 {
			b.buf = append(b.buf, p[:room]...)
		}
		return len(p), nil
	}
	b.buf = append(b.buf, p...)
	return len(p), nil
}

// tee sends p to the capture buffer and, within budget, to the live writer.
func tee(buf *limitedBuffer, live io.Writer, budget int64) io.Writer {
	if live == nil {
		return buf
	}
	return io.MultiWriter(buf, driverapi.NewBudgetWriter(live, budget))
}

// liveFirst sends output to the live writer and keeps in the buffer only
// what the live writer did not take (Command.StreamOnly); the buffer still
// counts every byte, so truncation is judged on the whole output.
type liveFirst struct {
	buf    *limitedBuffer
	live   io.Writer
	failed bool
	// streamed counts the bytes the live writer took (under buf.mu).
	streamed int64
}

// streamOnly is the writer of one stream of a StreamOnly command; without
// a live writer it is the buffer.
func streamOnly(buf *limitedBuffer, live io.Writer) *liveFirst {
	return &liveFirst{buf: buf, live: live, failed: live == nil}
}

// sent is how many bytes reached the live writer.
func (w *liveFirst) sent() int64 {
	w.buf.mu.Lock()
	defer w.buf.mu.Unlock()
	return w.streamed
}

func (w *liveFirst) Write(p []byte) (int, error) {
	n0 := len(p)
	w.buf.mu.Lock()
	room := w.buf.limit - w.buf.total
	w.buf.total += int64(n0)
	if int64(n0) > room {
		w.buf.truncated = true
		p = p[:max(room, 0)]
	}
	failed := w.failed
	w.buf.mu.Unlock()
	if len(p) == 0 {
		return n0, nil
	}
	if !failed {
		n, err := w.live.Write(p)
		n = min(max(n, 0), len(p))
		w.buf.mu.Lock()
		w.streamed += int64(n)
		w.buf.mu.Unlock()
		if err == nil && n == len(p) {
			return n0, nil
		}
		p = p[n:]
	}
	w.buf.mu.Lock()
	w.failed = true
	w.buf.buf = append(w.buf.buf, p...)
	w.buf.mu.Unlock()
	return n0, nil
}

// trimPartialRune drops a character cut in two at the end of b (by a length
// bound), so that it does not turn into a replacement.
func trimPartialRune(b []byte) []byte {
	for i := 1; i < utf8.UTFMax && i <= len(b); i++ {
		if utf8.RuneStart(b[len(b)-i]) {
			if !utf8.FullRune(b[len(b)-i:]) {
				return b[:len(b)-i]
			}
			break
		}
	}
	return b
}

// received is how many bytes the driver delivered.
func (b *limitedBuffer) received() int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.total
}
