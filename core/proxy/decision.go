package proxy

// ReasonCode is the machine-readable cause of a Decision. The values are
// stable: audit consumers match on them.
type ReasonCode string

const (
	// ReasonAllowed: the target matched the allowlist and every address the
	// proxy dialled passed vetting.
	ReasonAllowed ReasonCode = "policy_allow"
	// ReasonHostNotAllowed: no allowlist entry names the host.
	ReasonHostNotAllowed ReasonCode = "host_not_allowed"
	// ReasonPortNotAllowed: an entry names the host, but not this port.
	ReasonPortNotAllowed ReasonCode = "port_not_allowed"
	// ReasonIPLiteralNotAllowed: the client asked for an IP address that no
	// IP-literal entry lists (name entries never admit IP literals).
	ReasonIPLiteralNotAllowed ReasonCode = "ip_literal_not_allowed"
	// ReasonRefused*: an allowed name resolved only to addresses of that
	// class, which are not dialled unless listed as IP literals.
	ReasonRefusedLoopback    ReasonCode = "refused_loopback"
	ReasonRefusedPrivate     ReasonCode = "refused_private"
	ReasonRefusedLinkLocal   ReasonCode = "refused_link_local"
	ReasonRefusedCGNAT       ReasonCode = "refused_cgnat"
	ReasonRefusedMulticast   ReasonCode = "refused_multicast"
	ReasonRefusedUnspecified ReasonCode = "refused_unspecified"
	ReasonRefusedMetadata    ReasonCode = "refused_cloud_metadata"
	ReasonRefusedReserved    ReasonCode = "refused_reserved"
	// ReasonResolveFailed: the proxy could not resolve an allowed name.
	ReasonResolveFailed ReasonCode = "resolve_failed"
	// ReasonUpstreamFailed: policy allowed the target but no vetted address
	// accepted the connection.
	ReasonUpstreamFailed ReasonCode = "upstream_unreachable"
	// ReasonInvalidTarget: the requested host or port is malformed.
	ReasonInvalidTarget ReasonCode = "invalid_target"
	// ReasonHostHeaderMismatch: a plain HTTP request's Host header names a
	// different authority than its absolute URI.
	ReasonHostHeaderMismatch ReasonCode = "host_header_mismatch"
	// ReasonBadRequest: the request is not a well-formed proxy request
	// (origin-form target, unsupported scheme, oversized or broken header).
	ReasonBadRequest ReasonCode = "bad_request"
	// ReasonUnsupportedCommand: SOCKS5 BIND or UDP ASSOCIATE, or a SOCKS
	// client offering no acceptable authentication method.
	ReasonUnsupportedCommand ReasonCode = "unsupported_command"
	// ReasonConnectionLimit: the proxy already serves its maximum number of
	// client connections.
	ReasonConnectionLimit ReasonCode = "connection_limit"
	// ReasonInvalidHeaderValue: an injected header value would contain a
	// control character; the request is refused rather than split.
	ReasonInvalidHeaderValue ReasonCode = "invalid_header_value"
	// ReasonProxyAuthRequired: a client of the host-loopback listener
	// sent no credential (no Proxy-Authorization header, or a SOCKS5
	// greeting without the username/password method).
	ReasonProxyAuthRequired ReasonCode = "proxy_auth_required"
	// ReasonProxyAuthFailed: a client of the host-loopback listener sent a
	// credential that is not this proxy's (wrong, malformed, or another
	// proxy's).
	ReasonProxyAuthFailed ReasonCode = "proxy_auth_failed"
	// ReasonMethodNotAllowed: a TRACE or TRACK request. The upstream
	// echoes such a request back, headers included, and the proxy may have
	// added a secret to them; no such request is forwarded.
	ReasonMethodNotAllowed ReasonCode = "method_not_allowed"
)

// Protocol is the client protocol a Decision was taken for.
type Protocol string

const (
	ProtocolHTTP    Protocol = "http"
	ProtocolConnect Protocol = "http_connect"
	ProtocolSOCKS5  Protocol = "socks5"
)

// Decision is one audit record: a client asked for Host:Port and was let
// through or not. It never holds a secret value; Detail may name a secret
// and a header, never their content.
type Decision struct {
	SessionID  string
	CommandID  string
	Host       string
	Port       uint16
	Protocol   Protocol
	Allowed    bool
	ReasonCode ReasonCode
	Detail     string
	// Suppressed, when non-zero, makes this a summary record: it stands
	// for that many further decisions like it (same host, port, protocol,
	// verdict and reason; host and port empty for the catch-all summary)
	// that were counted rather than recorded one by one (see
	// Limits.AuditPerTarget). Summaries arrive when the proxy closes.
	Suppressed int
}

// denial is an internal error carrying the reason a request is refused.
type denial struct {
	code   ReasonCode
	detail string
}

func (d *denial) Error() string {
	if d.detail == "" {
		return string(d.code)
	}
	return string(d.code) + ": " + d.detail
}
