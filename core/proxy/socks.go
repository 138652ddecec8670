package proxy

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"
)

// SOCKS5 (RFC 1928) server side, CONNECT only, with username/password
// authentication (RFC 1929) on the host-loopback listener. It is hand-written rather
// than taken from a library because the server half is small, and the
// rules here (the proxy resolves names itself, vets the resolved address,
// dials that exact address, and answers BIND / UDP ASSOCIATE with
// "command not supported") need control over resolution, dialling and
// every reply code; the parser is fuzzed.
const (
	socksVersion = 0x05

	socksMethodNoAuth       = 0x00
	socksMethodUserPass     = 0x02
	socksMethodNoAcceptable = 0xff

	// RFC 1929 sub-negotiation: its version and status bytes.
	socksUserPassVersion = 0x01
	socksUserPassOK      = 0x00
	socksUserPassFailure = 0x01

	socksCmdConnect      = 0x01
	socksCmdBind         = 0x02
	socksCmdUDPAssociate = 0x03

	socksAtypIPv4   = 0x01
	socksAtypDomain = 0x03
	socksAtypIPv6   = 0x04

	socksRepSucceeded           = 0x00
	socksRepGeneralFailure      = 0x01
	socksRepNotAllowed          = 0x02
	socksRepHostUnreachable     = 0x04
	socksRepConnectionRefused   = 0x05
	socksRepCommandNotSupported = 0x07
	socksRepAtypNotSupported    = 0x08
)

// socksError is a handshake failure with the reply code to send.
type socksError struct {
	rep    byte
	reason ReasonCode
	detail string
}

func (e *socksError) Error() string { return string(e.reason) + ": " + e.detail }

// socksMethods is what a client's greeting offers, of the two methods
// served: "no authentication" on the unix socket (private to one
// command), username/password on the host-loopback listener.
type socksMethods struct {
	noAuth, userPass bool
}

// readSOCKSGreeting reads the method-selection message.
func readSOCKSGreeting(r io.Reader) (socksMethods, error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return socksMethods{}, err
	}
	if h[0] != socksVersion {
		return socksMethods{}, &socksError{rep: socksRepGeneralFailure, reason: ReasonBadRequest, detail: "not SOCKS version 5"}
	}
	if h[1] == 0 {
		return socksMethods{}, &socksError{rep: socksRepGeneralFailure, reason: ReasonBadRequest, detail: "no authentication methods offered"}
	}
	methods := make([]byte, h[1])
	if _, err := io.ReadFull(r, methods); err != nil {
		return socksMethods{}, err
	}
	var m socksMethods
	for _, b := range methods {
		switch b {
		case socksMethodNoAuth:
			m.noAuth = true
		case socksMethodUserPass:
			m.userPass = true
		}
	}
	return m, nil
}

// readSOCKSUserPass reads a username/password request (RFC 1929: version
// 1, then a length-prefixed user name and password). An empty name or
// password is read as such and then simply fails to match.
func readSOCKSUserPass(r io.Reader) (user, pass []byte, err error) {
	var h [2]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, nil, err
	}
	if h[0] != socksUserPassVersion {
		return nil, nil, &socksError{rep: socksUserPassFailure, reason: ReasonProxyAuthFailed, detail: "not a username/password (RFC 1929) sub-negotiation"}
	}
	user = make([]byte, h[1])
	if _, err := io.ReadFull(r, user); err != nil {
		return nil, nil, err
	}
	var l [1]byte
	if _, err := io.ReadFull(r, l[:]); err != nil {
		return nil, nil, err
	}
	pass = make([]byte, l[0])
	if _, err := io.ReadFull(r, pass); err != nil {
		return nil, nil, err
	}
	return user, pass, nil
}

// socksRequest is a parsed SOCKS5 request.
type socksRequest struct {
	cmd    byte
	target Target
	// rawHost is the name or address as sent, for the audit record when
	// the target itself is invalid.
	rawHost string
}

// readSOCKSRequest reads one request. A domain that is an IP literal is
// treated as that IP (so a name rule never admits it). Unknown commands are
// parsed in full so the reply can be exact.
func readSOCKSRequest(r io.Reader) (*socksRequest, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	if h[0] != socksVersion {
		return nil, &socksError{rep: socksRepGeneralFailure, reason: ReasonBadRequest, detail: "not SOCKS version 5"}
	}
	if h[2] != 0 {
		return nil, &socksError{rep: socksRepGeneralFailure, reason: ReasonBadRequest, detail: "reserved byte is not zero"}
	}
	var host string
	switch h[3] {
	case socksAtypIPv4:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		host = netip.AddrFrom4(b).String()
	case socksAtypIPv6:
		var b [16]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return nil, err
		}
		host = "[" + netip.AddrFrom16(b).String() + "]"
	case socksAtypDomain:
		var l [1]byte
		if _, err := io.ReadFull(r, l[:]); err != nil {
			return nil, err
		}
		if l[0] == 0 {
			return nil, &socksError{rep: socksRepGeneralFailure, reason: ReasonInvalidTarget, detail: "empty domain name"}
		}
		b := make([]byte, l[0])
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		host = string(b)
	default:
		return nil, &socksError{rep: socksRepAtypNotSupported, reason: ReasonBadRequest, detail: "unknown address type"}
	}
	var pb [2]byte
	if _, err := io.ReadFull(r, pb[:]); err != nil {
		return nil, err
	}
	port := uint16(pb[0])<<8 | uint16(pb[1])
	req := &socksRequest{cmd: h[1], rawHost: host}
	if h[1] != socksCmdConnect {
		return req, nil
	}
	t, err := ParseTarget(host, port)
	if err != nil {
		// The name is client-chosen bytes: quoted and bounded before it
		// goes into an audit record.
		if len(host) > 64 {
			host = host[:64]
		}
		req.rawHost = strconv.QuoteToASCII(host)
		return req, &socksError{rep: socksRepGeneralFailure, reason: ReasonInvalidTarget, detail: err.Error()}
	}
	req.target = t
	return req, nil
}

// socksReply sends a reply. The bound address is always 0.0.0.0:0: the
// client has no use for the proxy's outbound address, and it would tell
// the sandbox about the host's network.
func socksReply(w io.Writer, rep byte) error {
	_, err := w.Write([]byte{socksVersion, rep, 0x00, socksAtypIPv4, 0, 0, 0, 0, 0, 0})
	return err
}

// serveSOCKS serves one SOCKS5 client. With authed the client must offer
// username/password and present the proxy's credential before it may send
// a request; otherwise only "no authentication" is served.
func (p *Proxy) serveSOCKS(c net.Conn, br *bufio.Reader, authed bool) {
	// Read the whole handshake under the handshake deadline set by
	// serveConn; SOCKS needs no head limit, every field is length-bounded.
	methods, err := readSOCKSGreeting(br)
	if err != nil {
		p.socksFail(c, err, Target{}, false)
		return
	}
	if authed {
		if !p.socksAuthenticate(c, br, methods) {
			return
		}
	} else {
		if !methods.noAuth {
			p.record(Target{}, ProtocolSOCKS5, false, ReasonUnsupportedCommand, "client offered no acceptable authentication method (only 'no authentication' is served)")
			c.Write([]byte{socksVersion, socksMethodNoAcceptable})
			return
		}
		if _, err := c.Write([]byte{socksVersion, socksMethodNoAuth}); err != nil {
			return
		}
	}
	req, err := readSOCKSRequest(br)
	if err != nil {
		t := Target{}
		if req != nil {
			t.Host = req.rawHost
		}
		p.socksFail(c, err, t, true)
		return
	}
	switch req.cmd {
	case socksCmdConnect:
	case socksCmdBind, socksCmdUDPAssociate:
		name := "BIND"
		if req.cmd == socksCmdUDPAssociate {
			name = "UDP ASSOCIATE"
		}
		p.record(Target{Host: req.rawHost}, ProtocolSOCKS5, false, ReasonUnsupportedCommand, "SOCKS5 "+name+" is not served; only CONNECT")
		socksReply(c, socksRepCommandNotSupported)
		return
	default:
		p.record(Target{Host: req.rawHost}, ProtocolSOCKS5, false, ReasonUnsupportedCommand, "unknown SOCKS5 command")
		socksReply(c, socksRepCommandNotSupported)
		return
	}
	c.SetReadDeadline(time.Time{})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		select {
		case <-p.done:
			cancel()
		case <-ctx.Done():
		}
	}()
	up, d := p.connectUpstream(ctx, req.target, ProtocolSOCKS5, "")
	if d != nil {
		rep := byte(socksRepNotAllowed)
		switch {
		case d.code == ReasonResolveFailed:
			rep = socksRepHostUnreachable
		case d.code == ReasonUpstreamFailed && d.detail == "connection refused":
			rep = socksRepConnectionRefused
		case d.code == ReasonUpstreamFailed:
			rep = socksRepHostUnreachable
		}
		socksReply(c, rep)
		return
	}
	defer up.Close()
	if err := socksReply(c, socksRepSucceeded); err != nil {
		return
	}
	if n := br.Buffered(); n > 0 {
		b, _ := br.Peek(n)
		if _, err := up.Write(b); err != nil {
			return
		}
	}
	relay(c, up, p.limits.IdleTimeout)
}

// socksAuthenticate runs the username/password method and reports whether
// the client presented the proxy's credential. A client that does not
// offer the method gets "no acceptable methods"; a wrong credential gets
// failure status 1, and the caller closes the connection (RFC 1929 says
// the server must). Neither the name nor the password sent is recorded.
func (p *Proxy) socksAuthenticate(c net.Conn, br *bufio.Reader, m socksMethods) bool {
	if !m.userPass {
		p.record(Target{}, ProtocolSOCKS5, false, ReasonProxyAuthRequired, "client did not offer username/password authentication, which this listener requires; use the proxy URL from the command's proxy variables, which carries the credential")
		c.Write([]byte{socksVersion, socksMethodNoAcceptable})
		return false
	}
	if _, err := c.Write([]byte{socksVersion, socksMethodUserPass}); err != nil {
		return false
	}
	user, pass, err := readSOCKSUserPass(br)
	if err != nil {
		var se *socksError
		if errors.As(err, &se) {
			p.record(Target{}, ProtocolSOCKS5, false, se.reason, se.detail)
			c.Write([]byte{socksUserPassVersion, socksUserPassFailure})
			return false
		}
		p.record(Target{}, ProtocolSOCKS5, false, ReasonProxyAuthRequired, "connection closed or timed out during SOCKS5 authentication")
		return false
	}
	if !p.cred.matches(user, pass) {
		p.record(Target{}, ProtocolSOCKS5, false, ReasonProxyAuthFailed, "the proxy credential does not match this command's proxy")
		c.Write([]byte{socksUserPassVersion, socksUserPassFailure})
		return false
	}
	_, err = c.Write([]byte{socksUserPassVersion, socksUserPassOK})
	return err == nil
}

func (p *Proxy) socksFail(c net.Conn, err error, t Target, afterGreeting bool) {
	var se *socksError
	if errors.As(err, &se) {
		p.record(t, ProtocolSOCKS5, false, se.reason, se.detail)
		if afterGreeting {
			socksReply(c, se.rep)
		} else {
			c.Write([]byte{socksVersion, socksMethodNoAcceptable})
		}
		return
	}
	p.record(t, ProtocolSOCKS5, false, ReasonBadRequest, "connection closed or timed out during the SOCKS5 handshake")
}
