package driverapi

import (
	"io"
	"sync"
)

// BudgetWriter passes at most Limit bytes through to W, then keeps
// accepting (and counting) the rest without storing it. It never returns an
// error for going over budget: a child whose pipe write fails would die of
// SIGPIPE and the output's owner would learn less, not more.
type BudgetWriter struct {
	mu    sync.Mutex
	w     io.Writer
	limit int64
	total int64
	err   error // first error from w; later writes are only counted
}

// NewBudgetWriter returns a writer that forwards the first limit bytes to w.
func NewBudgetWriter(w io.Writer, limit int64) *BudgetWriter {
	return &BudgetWriter{w: w, limit: max(limit, 0)}
}

// Write forwards what still fits and counts everything.
func (b *BudgetWriter) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	room := b.limit - b.total
	b.total += int64(len(p))
	if room > 0 && b.err == nil && b.w != nil {
		n := int64(len(p))
		if n > room {
			n = room
		}
		if _, err := b.w.Write(p[:n]); err != nil {
			b.err = err
		}
	}
	return len(p), nil
}

// Total is the number of bytes written, kept or not.
func (b *BudgetWriter) Total() int64 { b.mu.Lock(); defer b.mu.Unlock(); return b.total }

// Truncated reports whether more was written than the budget kept.
func (b *BudgetWriter) Truncated() bool { b.mu.Lock(); defer b.mu.Unlock(); return b.total > b.limit }

// Err is the first error the underlying writer returned, if any.
func (b *BudgetWriter) Err() error { b.mu.Lock(); defer b.mu.Unlock(); return b.err }
