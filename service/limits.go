package service

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/aleph-sandbox/aleph-sandbox/core"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// ReasonResourceExhausted is the reason code of a request refused at a
// configured capacity limit; ErrorDetail.Field names the limit's
// configuration key (e.g. "serve.max_request_bytes").
const ReasonResourceExhausted = string(core.ReasonResourceExhausted)

// exhausted is the status of a request past a configured limit: code
// resource_exhausted, the limit's key in the detail's field.
func exhausted(limit string, value int64, what string) *connect.Error {
	return withDetail(connect.CodeResourceExhausted, &core.LimitError{Limit: limit, Value: value, Reason: what},
		&hostv1.ErrorDetail{ReasonCode: ReasonResourceExhausted, Field: limit})
}

// driverLimitHint adds to a driver's capacity limit where it is set. The
// driver names its key ("sandbox.linux.max_session_networks") and can only
// say "raise the limit": a serve whose max_sessions admits more sessions
// than the driver's cap, with the key's section unsaid, read as a limit
// of serve's. The pipeline's own limits (*core.LimitError) say it already.
func driverLimitHint(err error) error {
	var dle *driverapi.LimitError
	var le *core.LimitError
	if errors.As(err, &le) || !errors.As(err, &dle) {
		return err
	}
	i := strings.LastIndexByte(dle.Limit, '.')
	if i <= 0 || i == len(dle.Limit)-1 {
		return err
	}
	return fmt.Errorf("%w: a limit of the driver, not of serve; to raise it, set %s under [%s] in serve's configuration file and restart serve",
		err, dle.Limit[i+1:], dle.Limit[:i])
}

// strictJSON is the Connect JSON codec refusing unknown fields: the
// default one discards them, so a misspelt limit ("memory_mbb",
// "timeout_secs") ran the command without it. protojson's error names
// the field, and the call fails invalid_argument.
type strictJSON struct{ name string }

func (c strictJSON) Name() string { return c.name }

func (c strictJSON) Marshal(m any) ([]byte, error) {
	pm, ok := m.(proto.Message)
	if !ok {
		return nil, fmt.Errorf("%T is not a protobuf message", m)
	}
	return protojson.MarshalOptions{}.Marshal(pm)
}

func (c strictJSON) Unmarshal(b []byte, m any) error {
	pm, ok := m.(proto.Message)
	if !ok {
		return fmt.Errorf("%T is not a protobuf message", m)
	}
	if len(b) == 0 {
		// An empty body is the empty message, as Connect's own codec has it.
		proto.Reset(pm)
		return nil
	}
	if err := (protojson.UnmarshalOptions{DiscardUnknown: false}).Unmarshal(b, pm); err != nil {
		return fmt.Errorf("%w (field names are those of aleph.host.v1; a misspelt one is refused, not ignored)", err)
	}
	return nil
}

// handlerOptions are the Connect options every handler gets: the strict
// JSON codec under both names Connect registers, and the message bound.
func handlerOptions(maxRequest int64) []connect.HandlerOption {
	return []connect.HandlerOption{
		connect.WithCodec(strictJSON{name: "json"}),
		connect.WithCodec(strictJSON{name: "json; charset=utf-8"}),
		connect.WithReadMaxBytes(int(maxRequest)),
	}
}

// limitBody bounds each request body at the transport: a body announced
// larger than limit is refused before a byte of it is read, and one that
// runs past limit fails its read there, so a client cannot make the
// server read (and hold) more. The error is a Connect error, which
// Connect passes to the client as it is: resource_exhausted naming
// serve.max_request_bytes.
func limitBody(limit int64, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Body != nil && r.Body != http.NoBody {
			r.Body = &boundedBody{rc: r.Body, left: limit, limit: limit, announced: r.ContentLength, h: w.Header()}
		}
		next.ServeHTTP(w, r)
	})
}

type boundedBody struct {
	rc        io.ReadCloser
	h         http.Header
	left      int64
	limit     int64
	announced int64
}

func (b *boundedBody) Read(p []byte) (int, error) {
	if b.announced > b.limit {
		b.refused()
		return 0, exhausted("serve.max_request_bytes", b.limit, fmt.Sprintf("the request body is %d bytes, over the limit", b.announced))
	}
	if b.left <= 0 {
		// One byte more tells a body of exactly limit bytes (EOF) from a
		// longer one.
		var one [1]byte
		if n, _ := b.rc.Read(one[:]); n == 0 {
			return 0, io.EOF
		}
		b.refused()
		return 0, exhausted("serve.max_request_bytes", b.limit, "the request body is over the limit")
	}
	if int64(len(p)) > b.left {
		p = p[:b.left]
	}
	n, err := b.rc.Read(p)
	b.left -= int64(n)
	return n, err
}

func (b *boundedBody) Close() error { return b.rc.Close() }

// refused ends the connection after the answer: the rest of the body is
// never read, so an HTTP/1.1 connection cannot carry another request
// (its unread bytes would be taken for one).
func (b *boundedBody) refused() { b.h.Set("Connection", "close") }

// connLimits counts the open connections of a server, in total and per
// peer, and the ones refused at the caps.
type connLimits struct {
	total, perPeer int
	mu             sync.Mutex
	open           int
	byPeer         map[string]int
	refusedTotal   atomic.Int64
	refusedPeer    atomic.Int64
}

func newConnLimits(l core.ServeLimits) *connLimits {
	return &connLimits{total: l.MaxConnections, perPeer: l.MaxConnectionsPerPeer, byPeer: map[string]int{}}
}

// take reserves a connection for peer; false: a cap is reached.
func (c *connLimits) take(peer string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.open >= c.total:
		c.refusedTotal.Add(1)
		return false
	case c.byPeer[peer] >= c.perPeer:
		c.refusedPeer.Add(1)
		return false
	}
	c.open++
	c.byPeer[peer]++
	return true
}

func (c *connLimits) release(peer string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.open--
	if c.byPeer[peer]--; c.byPeer[peer] <= 0 {
		delete(c.byPeer, peer)
	}
}

func (c *connLimits) stats() (open int, refusedTotal, refusedPeer int64) {
	c.mu.Lock()
	open = c.open
	c.mu.Unlock()
	return open, c.refusedTotal.Load(), c.refusedPeer.Load()
}

// LimitListener wraps a listener of the service with its connection caps:
// a connection past them is closed at once (counted in /metrics as
// aleph_sandbox_connections_refused_total), so stalled clients cannot
// take the server's descriptors. The peer is a TCP client's IP address;
// every unix-socket peer is "unix" (they are the same user).
func (s *Server) LimitListener(l net.Listener) net.Listener {
	return &limitListener{Listener: l, c: s.conns}
}

type limitListener struct {
	net.Listener
	c *connLimits
}

func (l *limitListener) Accept() (net.Conn, error) {
	for {
		conn, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		peer := "unix"
		if a, ok := conn.RemoteAddr().(*net.TCPAddr); ok {
			peer = a.IP.String()
		}
		if !l.c.take(peer) {
			_ = conn.Close()
			continue
		}
		return &countedConn{Conn: conn, release: func() { l.c.release(peer) }}, nil
	}
}

type countedConn struct {
	net.Conn
	once    sync.Once
	release func()
}

func (c *countedConn) Close() error {
	c.once.Do(c.release)
	return c.Conn.Close()
}

// errUnwrapConn lets TLS and the peer-credential check reach the
// connection under the count.
func (c *countedConn) NetConn() net.Conn { return c.Conn }

var _ = errors.New
