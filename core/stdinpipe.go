package core

import (
	"context"
	"sync"
)

// StdinPipe is a streamed stdin for one Execute (Command.StdinStream) that
// holds at most a bound of written, unread bytes: a writer faster than the
// command waits (backpressure) instead of growing a buffer. The service
// feeds `exec --host -i` through one.
type StdinPipe struct {
	p      *boundedPipe
	once   sync.Once
	opened chan struct{}
}

// NewStdinPipe returns a pipe holding at most limit unread bytes (limit
// <= 0: the process table's default, stdin_bytes).
func NewStdinPipe(limit int) *StdinPipe {
	if limit <= 0 {
		limit = DefaultProcessConfig().StdinBytes
	}
	return &StdinPipe{p: newBoundedPipe(limit), opened: make(chan struct{})}
}

// Read implements io.Reader for the command's side.
func (s *StdinPipe) Read(b []byte) (int, error) {
	s.once.Do(func() { close(s.opened) })
	return s.p.Read(b)
}

// Opened is closed at the first Read: the command runs and reads its
// stdin (any approval has been answered).
func (s *StdinPipe) Opened() <-chan struct{} { return s.opened }

// Write gives b to the command, waiting while the pipe is full until ctx
// ends. It returns how much was taken: less than len(b) with
// ErrStdinClosed after CloseWrite, ErrProcessEnded after CloseRead, or
// ctx's error.
func (s *StdinPipe) Write(ctx context.Context, b []byte) (int, error) {
	return s.p.write(ctx, b, nil)
}

// Buffered is how many written bytes the command has not read yet.
func (s *StdinPipe) Buffered() int { return s.p.buffered() }

// CloseWrite ends the input: the command reads EOF after what is held.
func (s *StdinPipe) CloseWrite() { s.p.CloseWrite() }

// CloseRead ends the pipe for good (the command has ended): held bytes are
// dropped and writers return.
func (s *StdinPipe) CloseRead() { s.p.CloseRead() }
