package proxy

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"time"

	"golang.org/x/net/http/httpguts"
)

// PolicyName is how refusals name the policy that refused them.
const PolicyName = "aleph-sandbox network policy"

// requestError is a request the proxy will not serve, with the HTTP status
// to answer and, when known, the target it named.
type requestError struct {
	status int
	denial
	target Target
}

// proxyRequest is a parsed request head: a CONNECT to Target, or a plain
// HTTP request whose absolute URI names Target.
type proxyRequest struct {
	req    *http.Request
	target Target
}

// readProxyRequest reads one request head from br and checks that it is a
// proxy request: CONNECT with an authority-form target and a port, or an
// absolute http:// URI whose Host header (when present) names the same
// authority. The head must end within maxHead bytes (br's buffer must be
// at least that big). It is the parser the fuzz target exercises.
func readProxyRequest(br *bufio.Reader, maxHead int) (*proxyRequest, error) {
	head, err := peekHead(br, maxHead)
	if err != nil {
		return nil, err
	}
	// net/http drops the Host header when the URI is absolute, and the
	// check needs it, so the Host lines are taken from the raw head.
	hosts, err := rawHostHeaders(head)
	if err != nil {
		return nil, &requestError{status: http.StatusBadRequest, denial: denial{code: ReasonBadRequest, detail: err.Error()}}
	}
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, err
	}
	req.Header.Del("Host")
	for _, h := range hosts {
		req.Header.Add("Host", h)
	}
	bad := func(status int, code ReasonCode, detail string, t Target) (*proxyRequest, error) {
		req.Body.Close()
		return nil, &requestError{status: status, denial: denial{code: code, detail: detail}, target: t}
	}
	if req.ProtoMajor != 1 {
		return bad(http.StatusHTTPVersionNotSupported, ReasonBadRequest, "only HTTP/1.x is served", Target{})
	}
	if len(req.Header.Values("Host")) > 1 {
		return bad(http.StatusBadRequest, ReasonBadRequest, "more than one Host header", Target{})
	}
	if req.Method == http.MethodConnect {
		host, portStr, err := net.SplitHostPort(req.RequestURI)
		if err != nil || strings.HasPrefix(req.RequestURI, "/") {
			return bad(http.StatusBadRequest, ReasonBadRequest, "CONNECT needs a host:port target", Target{})
		}
		t, err := targetFrom(host, portStr)
		if err != nil {
			return bad(http.StatusBadRequest, ReasonInvalidTarget, err.Error(), Target{})
		}
		if hh := req.Header.Get("Host"); hh != "" {
			if ht, err := hostHeaderTarget(hh, t.Port); err != nil || ht != t {
				return bad(http.StatusBadRequest, ReasonHostHeaderMismatch, "Host header does not name the CONNECT target", t)
			}
		}
		return &proxyRequest{req: req, target: t}, nil
	}
	u := req.URL
	if u == nil || !u.IsAbs() || u.Host == "" {
		return bad(http.StatusBadRequest, ReasonBadRequest, "a proxy request needs an absolute http:// URI (use CONNECT for HTTPS)", Target{})
	}
	if !strings.EqualFold(u.Scheme, "http") {
		return bad(http.StatusBadRequest, ReasonBadRequest, "only http:// URIs are forwarded; use CONNECT for "+strings.ToLower(u.Scheme), Target{})
	}
	if u.User != nil {
		return bad(http.StatusBadRequest, ReasonBadRequest, "user information in the URI is not forwarded", Target{})
	}
	host, portStr := u.Hostname(), u.Port()
	if portStr == "" {
		if strings.HasSuffix(u.Host, ":") {
			return bad(http.StatusBadRequest, ReasonInvalidTarget, "empty port", Target{})
		}
		portStr = "80"
	}
	if strings.Contains(u.Host, "[") {
		host = "[" + host + "]"
	}
	t, err := targetFrom(host, portStr)
	if err != nil {
		return bad(http.StatusBadRequest, ReasonInvalidTarget, err.Error(), Target{})
	}
	if hv := req.Header.Values("Host"); len(hv) == 1 {
		ht, err := hostHeaderTarget(hv[0], 80)
		if err != nil || ht != t {
			return bad(http.StatusBadRequest, ReasonHostHeaderMismatch, "Host header does not name the same host and port as the request URI", t)
		}
	}
	return &proxyRequest{req: req, target: t}, nil
}

// peekHead returns the request head (through the blank line) without
// consuming it, or errHeadTooLarge when maxHead bytes hold no blank line.
func peekHead(br *bufio.Reader, maxHead int) ([]byte, error) {
	if maxHead > br.Size() {
		maxHead = br.Size()
	}
	scanned := 0
	for {
		buf, _ := br.Peek(br.Buffered())
		if i := headEnd(buf, scanned); i >= 0 {
			return buf[:i], nil
		}
		if len(buf) >= maxHead {
			return nil, errHeadTooLarge
		}
		scanned = max(0, len(buf)-3)
		if _, err := br.Peek(len(buf) + 1); err != nil {
			if len(buf) > 0 && errors.Is(err, io.EOF) {
				return nil, io.ErrUnexpectedEOF
			}
			return nil, err
		}
	}
}

// headEnd finds the end of the blank line ending a head ("\n\r\n" or
// "\n\n"), searching from index from.
func headEnd(b []byte, from int) int {
	for i := from; i < len(b); i++ {
		if b[i] != '\n' {
			continue
		}
		if i+1 < len(b) && b[i+1] == '\n' {
			return i + 2
		}
		if i+2 < len(b) && b[i+1] == '\r' && b[i+2] == '\n' {
			return i + 3
		}
	}
	return -1
}

// rawHostHeaders returns the values of the Host header lines of a head.
// Obsolete line folding and a field name that is not a token (whitespace
// before the colon, as in "Host : evil.example") are refused outright:
// both are classic ways to make two parsers disagree about a header, and
// RFC 9112 (sections 5.1 and 5.2) says a server must reject them. net/http
// keeps "Host " as a header of its own, which would pass the Host check
// here and then reach the upstream.
func rawHostHeaders(head []byte) ([]string, error) {
	lines := strings.Split(strings.ReplaceAll(string(head), "\r\n", "\n"), "\n")
	var hosts []string
	for _, l := range lines[1:] {
		if l == "" {
			continue
		}
		if l[0] == ' ' || l[0] == '\t' {
			return nil, errors.New("obsolete header line folding")
		}
		name, value, ok := strings.Cut(l, ":")
		if !ok {
			return nil, errors.New("header line without a colon")
		}
		if !httpguts.ValidHeaderFieldName(name) {
			// The name is client-chosen bytes: neither quoted into the
			// answer nor into the audit record.
			return nil, errors.New("malformed header field name (whitespace before the colon?)")
		}
		if strings.EqualFold(name, "Host") {
			hosts = append(hosts, textproto.TrimString(value))
		}
	}
	return hosts, nil
}

func targetFrom(host, portStr string) (Target, error) {
	port, err := parsePort(portStr)
	if err != nil {
		return Target{}, err
	}
	if strings.Contains(host, ":") && !strings.HasPrefix(host, "[") {
		host = "[" + host + "]"
	}
	return ParseTarget(host, port)
}

// hostHeaderTarget parses a Host header value, defaulting the port.
func hostHeaderTarget(v string, defPort uint16) (Target, error) {
	if strings.ContainsAny(v, "/@?# \t") {
		return Target{}, errors.New("malformed Host header")
	}
	host, portStr := v, ""
	if h, p, err := net.SplitHostPort(v); err == nil {
		host, portStr = h, p
	} else if strings.Count(v, ":") == 1 && !strings.HasPrefix(v, "[") {
		return Target{}, errors.New("malformed Host header")
	}
	if portStr == "" {
		portStr = strconv.Itoa(int(defPort))
	}
	if strings.HasPrefix(host, "[") && strings.HasSuffix(host, "]") {
		host = host[1 : len(host)-1]
	}
	return targetFrom(host, portStr)
}

// serveHTTP serves requests on one client connection until it closes, a
// CONNECT turns it into a tunnel, or a request cannot be continued. With
// authed, every request (not only the first on a connection) must carry
// the proxy's credential, checked before its target is vetted.
func (p *Proxy) serveHTTP(c net.Conn, br *bufio.Reader, authed bool) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	first := true
	for {
		if first {
			c.SetReadDeadline(time.Now().Add(p.limits.HandshakeTimeout))
		} else {
			c.SetReadDeadline(time.Now().Add(p.limits.IdleTimeout))
		}
		pr, err := readProxyRequest(br, p.limits.MaxHeaderBytes)
		if err != nil {
			p.answerBadRequest(c, err, !first)
			return
		}
		first = false
		if authed {
			if d := p.cred.checkProxyAuthorization(pr.req.Header.Values("Proxy-Authorization")); d != nil {
				pr.req.Body.Close()
				proto := ProtocolHTTP
				if pr.req.Method == http.MethodConnect {
					proto = ProtocolConnect
				}
				p.record(pr.target, proto, false, d.code, d.detail)
				writeHTTPErrorWith(c, http.StatusProxyAuthRequired, d.code, pr.target.hostPort(), d.detail, proxyAuthenticate)
				return
			}
		}
		c.SetReadDeadline(time.Time{})
		if echoMethod(pr.req.Method) {
			pr.req.Body.Close()
			p.refuseEchoMethod(c, pr.target, ProtocolHTTP)
			return
		}
		if pr.req.Method == http.MethodConnect {
			p.handleConnect(ctx, c, br, pr)
			return
		}
		if !p.handleForward(ctx, c, br, pr) {
			return
		}
	}
}

// echoMethod reports the methods whose response echoes the request back:
// TRACE (RFC 9110 9.3.8) and Microsoft's TRACK. A forwarded one would hand
// the child every header the proxy set, an injected secret among them, so
// neither is forwarded, whether or not an injection rule names the target
// (rules and targets change; the refusal should not depend on them).
// Methods are case-sensitive, but servers that fold case exist, so any case
// is refused.
func echoMethod(m string) bool {
	return strings.EqualFold(m, http.MethodTrace) || strings.EqualFold(m, "TRACK")
}

// refuseEchoMethod answers a TRACE or TRACK with 405 and records the
// refusal; the connection ends, as after every refusal.
func (p *Proxy) refuseEchoMethod(w io.Writer, t Target, proto Protocol) {
	const detail = "TRACE and TRACK are not forwarded: the response would echo the request headers, injected secrets included"
	p.record(t, proto, false, ReasonMethodNotAllowed, detail)
	writeHTTPError(w, http.StatusMethodNotAllowed, ReasonMethodNotAllowed, t.hostPort(), detail)
}

func (p *Proxy) answerBadRequest(c net.Conn, err error, keptAlive bool) {
	var re *requestError
	switch {
	case errors.As(err, &re):
		p.record(re.target, ProtocolHTTP, false, re.code, re.detail)
		writeHTTPError(c, re.status, re.code, re.target.hostPort(), re.detail)
	case errors.Is(err, errHeadTooLarge):
		p.record(Target{}, ProtocolHTTP, false, ReasonBadRequest, "request head too large")
		writeHTTPError(c, http.StatusRequestHeaderFieldsTooLarge, ReasonBadRequest, "", "request head too large")
	case keptAlive && (errors.Is(err, io.EOF) || isTimeout(err)):
		// The client closed or went quiet between requests.
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), isTimeout(err):
		p.record(Target{}, ProtocolHTTP, false, ReasonBadRequest, "connection closed or timed out before a complete request")
	default:
		p.record(Target{}, ProtocolHTTP, false, ReasonBadRequest, "malformed request")
		writeHTTPError(c, http.StatusBadRequest, ReasonBadRequest, "", "malformed request")
	}
}

func (t Target) hostPort() string {
	if t.Host == "" {
		return ""
	}
	h := t.Host
	if t.IP.Is6() {
		h = "[" + h + "]"
	}
	return h + ":" + strconv.Itoa(int(t.Port))
}

// writeHTTPError answers with a short plain-text body that names the
// policy, the target and the reason, and closes the exchange.
func writeHTTPError(w io.Writer, status int, code ReasonCode, target, detail string) {
	writeHTTPErrorWith(w, status, code, target, detail, "")
}

// writeHTTPErrorWith is writeHTTPError with extra header lines (each
// ending in CRLF).
func writeHTTPErrorWith(w io.Writer, status int, code ReasonCode, target, detail, extra string) {
	var body string
	if target != "" {
		body = fmt.Sprintf("%s: connection to %s refused (%s): %s\n", PolicyName, target, code, detail)
	} else {
		body = fmt.Sprintf("%s: request refused (%s): %s\n", PolicyName, code, detail)
	}
	if status == http.StatusBadGateway {
		body = strings.Replace(body, " refused ", " failed ", 1)
	}
	fmt.Fprintf(w, "HTTP/1.1 %d %s\r\nContent-Type: text/plain; charset=utf-8\r\nX-Aleph-Sandbox-Reason: %s\r\n%sContent-Length: %d\r\nConnection: close\r\n\r\n%s",
		status, http.StatusText(status), code, extra, len(body), body)
}

func statusFor(d *denial) int {
	switch d.code {
	case ReasonUpstreamFailed, ReasonResolveFailed:
		return http.StatusBadGateway
	case ReasonInvalidTarget, ReasonBadRequest, ReasonHostHeaderMismatch:
		return http.StatusBadRequest
	}
	return http.StatusForbidden
}

func (p *Proxy) handleConnect(ctx context.Context, c net.Conn, br *bufio.Reader, pr *proxyRequest) {
	if p.tls != nil && len(p.injectionsFor(pr.target)) > 0 {
		p.interceptConnect(ctx, c, br, pr.target)
		return
	}
	up, d := p.connectUpstream(ctx, pr.target, ProtocolConnect, "")
	if d != nil {
		writeHTTPError(c, statusFor(d), d.code, pr.target.hostPort(), d.detail)
		return
	}
	defer up.Close()
	if _, err := io.WriteString(c, "HTTP/1.1 200 Connection established\r\n\r\n"); err != nil {
		return
	}
	// Bytes the client sent right after the head (a TLS ClientHello, say)
	// are already in br.
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	relay(c, up, p.limits.IdleTimeout)
}

// hop-by-hop headers (RFC 9110 7.6.1) and proxy credentials never travel
// past the proxy in either direction.
var hopHeaders = []string{
	"Connection", "Proxy-Connection", "Keep-Alive", "Proxy-Authenticate",
	"Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
}

// handleForward sends one plain HTTP request upstream over a fresh
// connection to a vetted address and copies the response back. It returns
// whether the client connection can carry another request.
func (p *Proxy) handleForward(ctx context.Context, c net.Conn, br *bufio.Reader, pr *proxyRequest) bool {
	req, t := pr.req, pr.target
	defer req.Body.Close()
	clientWantsClose := req.Close
	removeHopHeaders(req.Header)
	req.Header.Del("Host")
	if _, ok := req.Header["User-Agent"]; !ok {
		// Keep net/http from adding its own User-Agent.
		req.Header["User-Agent"] = nil
	}
	injected, d := p.applyInjections(req.Header, t)
	if d != nil {
		p.record(t, ProtocolHTTP, false, d.code, d.detail)
		writeHTTPError(c, http.StatusForbidden, d.code, t.hostPort(), "secret header value refused")
		return false
	}
	up, d := p.connectUpstream(ctx, t, ProtocolHTTP, injected)
	if d != nil {
		writeHTTPError(c, statusFor(d), d.code, t.hostPort(), d.detail)
		return false
	}
	iu := &idleConn{Conn: up, idle: p.limits.IdleTimeout, act: &activity{}}
	iu.act.touch()
	defer up.Close()

	// The request goes out in origin form, to the authority the URI named
	// (the Host header was checked to agree), on a connection used once.
	req.Host = req.URL.Host
	req.RequestURI = ""
	req.Close = true
	// Writing runs beside reading so "Expect: 100-continue" and early
	// upstream answers work without deadlock.
	werr := make(chan error, 1)
	go func() {
		bw := bufio.NewWriter(iu)
		err := req.Write(bw)
		if err == nil {
			err = bw.Flush()
		}
		werr <- err
	}()
	ubr := bufio.NewReader(iu)
	cw := bufio.NewWriter(&idleConn{Conn: c, idle: p.limits.IdleTimeout, act: iu.act})
	for {
		resp, err := http.ReadResponse(ubr, req)
		if err != nil {
			up.Close()
			<-werr
			writeHTTPError(c, http.StatusBadGateway, ReasonUpstreamFailed, t.hostPort(), "the upstream response could not be read")
			return false
		}
		removeHopHeaders(resp.Header)
		if resp.StatusCode >= 100 && resp.StatusCode < 200 && resp.StatusCode != http.StatusSwitchingProtocols {
			resp.Write(cw)
			if cw.Flush() != nil {
				up.Close()
				<-werr
				return false
			}
			continue
		}
		if resp.StatusCode == http.StatusSwitchingProtocols {
			// Upgrade was stripped from the request; a 101 anyway is not
			// relayed.
			resp.Body.Close()
			up.Close()
			<-werr
			writeHTTPError(c, http.StatusBadGateway, ReasonUpstreamFailed, t.hostPort(), "protocol upgrades are not relayed")
			return false
		}
		// Keep the client connection when the body is delimited; net/http
		// then writes the right framing (chunked when the length is
		// unknown for HTTP/1.1 clients).
		delimited := resp.ContentLength >= 0 || len(resp.TransferEncoding) > 0 || req.Method == http.MethodHead
		keepClient := !clientWantsClose && delimited && req.ProtoAtLeast(1, 1)
		resp.Close = !keepClient
		err = resp.Write(cw)
		resp.Body.Close()
		if err == nil {
			err = cw.Flush()
		}
		up.Close()
		if e := <-werr; e != nil && err == nil {
			// Upstream answered before taking the whole body; the rest of
			// the client's body is unread, so the connection cannot go on.
			return false
		}
		return err == nil && keepClient
	}
}
