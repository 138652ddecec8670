package driverapi

import (
	"net"
	"strconv"
)

// ProxyRoute is how a sandboxed command reaches the host's managed proxy
// under NetworkAllowHosts. A driver that claims FeatureNetworkViaProxy names
// its route in HostCapabilities.Details[DetailNetworkRoute]; the host then
// builds the child's proxy variables (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY and
// their lower-case forms, NO_PROXY empty) for that route and passes them in
// RunSpec.Env like any other variable. Whatever the route, the command's only
// way out must be the proxy: the driver blocks every other socket, and the
// proxy decides per connection (host allowlist, resolved-address checks,
// secret injection).
type ProxyRoute string

const (
	// RouteNamespaceBridge (Linux): the command runs in a network namespace
	// of its own, with nothing in it but loopback. The DRIVER runs a bridge
	// inside that namespace listening on BridgeHTTPAddr and BridgeSOCKSAddr;
	// each connection accepted there is relayed to the unix socket in
	// ProfileRequest.Proxy.UnixSocket (the proxy's only listener on this
	// route; it tells HTTP from SOCKS5 itself, so both ports may relay to the
	// same socket). The host's proxy variables name the bridge addresses. The
	// bridge must not be something the command can replace or bypass: the
	// reference driver confines the command's sockets (seccomp) so that it can
	// only connect to the bridge ports (Landlock TCP rules).
	RouteNamespaceBridge ProxyRoute = "namespace_bridge"
	// RouteHostLoopback (macOS, Windows): the command shares the host's
	// network stack and may connect to exactly one loopback address,
	// ProfileRequest.Proxy.TCPAddr, where the HOST's proxy listens. Every
	// other host process can reach that address too, so the proxy requires a
	// per-proxy credential on every connection, carried in the proxy URLs the
	// host puts in the child's environment (user:token@host:port).
	RouteHostLoopback ProxyRoute = "host_loopback"
)

// The in-namespace bridge's ports on RouteNamespaceBridge. Fixed, so that
// the host can write the child's proxy variables without asking the driver.
const (
	BridgeHTTPPort  = 3128
	BridgeSOCKSPort = 1080
)

// BridgeHTTPAddr is where the bridge accepts HTTP proxy (CONNECT and
// absolute-URI) connections inside the command's namespace.
func BridgeHTTPAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(BridgeHTTPPort))
}

// BridgeSOCKSAddr is where the bridge accepts SOCKS5 connections.
func BridgeSOCKSAddr() string {
	return net.JoinHostPort("127.0.0.1", strconv.Itoa(BridgeSOCKSPort))
}
