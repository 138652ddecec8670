package proxy

import (
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// activity is the last time any byte moved on either side of a relayed
// pair. A connection is idle only when both directions are quiet, so a
// long one-way download is not cut because the upload side is silent.
type activity struct{ last atomic.Int64 }

func (a *activity) touch()               { a.last.Store(time.Now().UnixNano()) }
func (a *activity) since() time.Duration { return time.Since(time.Unix(0, a.last.Load())) }

// idleConn extends its deadlines on each call and, when a read times out
// while the other direction was recently active, keeps waiting.
type idleConn struct {
	net.Conn
	idle time.Duration
	act  *activity
}

func (c *idleConn) Read(b []byte) (int, error) {
	for {
		c.Conn.SetReadDeadline(time.Now().Add(c.idle))
		n, err := c.Conn.Read(b)
		if n > 0 {
			c.act.touch()
		}
		if err != nil && n == 0 && isTimeout(err) && c.act.since() < c.idle {
			continue
		}
		return n, err
	}
}

func (c *idleConn) Write(b []byte) (int, error) {
	c.Conn.SetWriteDeadline(time.Now().Add(c.idle))
	n, err := c.Conn.Write(b)
	if n > 0 {
		c.act.touch()
	}
	return n, err
}

func (c *idleConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout() || errors.Is(err, os.ErrDeadlineExceeded)
}

func isConnRefused(err error) bool { return errors.Is(err, syscall.ECONNREFUSED) }

// relay copies both ways until both directions end. EOF on one side is
// passed on as a half-close; an error on either side aborts both.
func relay(a, b net.Conn, idle time.Duration) {
	act := &activity{}
	act.touch()
	ia := &idleConn{Conn: a, idle: idle, act: act}
	ib := &idleConn{Conn: b, idle: idle, act: act}
	var wg sync.WaitGroup
	wg.Add(2)
	pipe := func(dst, src *idleConn) {
		defer wg.Done()
		buf := make([]byte, 64<<10)
		_, err := io.CopyBuffer(writerOnly{dst}, readerOnly{src}, buf)
		if err != nil {
			a.Close()
			b.Close()
			return
		}
		dst.CloseWrite()
	}
	go pipe(ib, ia)
	go pipe(ia, ib)
	wg.Wait()
	a.Close()
	b.Close()
}

// readerOnly and writerOnly hide ReadFrom/WriteTo so io.CopyBuffer goes
// through idleConn's deadline handling.
type readerOnly struct{ io.Reader }
type writerOnly struct{ io.Writer }
