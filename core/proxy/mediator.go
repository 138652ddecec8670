package proxy

import (
	"context"
	"crypto/x509"
	"runtime"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Fixed ports the Linux bridge listens on inside the sandbox's network
// namespace (on its own loopback, which nothing else uses). Both relay to
// the same proxy socket; the proxy tells the protocols apart itself.
// The route itself is part of the driver contract (driverapi.ProxyRoute).
const (
	BridgeHTTPPort  = driverapi.BridgeHTTPPort
	BridgeSOCKSPort = driverapi.BridgeSOCKSPort
)

// BridgeListenAddrs are the in-namespace addresses the Linux bridge binds.
func BridgeListenAddrs() []string {
	return []string{driverapi.BridgeHTTPAddr(), driverapi.BridgeSOCKSAddr()}
}

// Route is how the child reaches the proxy, which decides what its proxy
// variables say.
type Route int

const (
	// RouteDefault: RouteBridge on Linux, RouteHostLoopback elsewhere.
	RouteDefault Route = iota
	// RouteBridge: the child runs in its own network namespace where a
	// bridge listens on 127.0.0.1:BridgeHTTPPort and :BridgeSOCKSPort and
	// relays to the unix socket, the proxy's only listener.
	RouteBridge
	// RouteHostLoopback: the child may reach host loopback and talks to
	// Endpoint().TCPAddr directly (macOS). Every other process on the host
	// can reach that address too, so each client there must present the
	// proxy's credential, which the child's proxy URLs carry; so must a
	// client of the unix socket, which the child does not use here.
	RouteHostLoopback
)

func (r Route) resolve() Route {
	if r != RouteDefault {
		return r
	}
	if runtime.GOOS == "linux" {
		return RouteBridge
	}
	return RouteHostLoopback
}

// ProxyEnv builds the child's proxy variables for a proxy reachable
// without a credential at httpAddr (HTTP CONNECT and forwarding) and
// socksAddr (SOCKS5, with socks5h so names are resolved by the proxy,
// never by the child). Both spellings are set because tools disagree on
// case, and NO_PROXY is empty so nothing bypasses the proxy.
func ProxyEnv(httpAddr, socksAddr string) []driverapi.EnvVar {
	return proxyEnvURLs("http://"+httpAddr, "socks5h://"+socksAddr)
}

// proxyEnvURLs is ProxyEnv for whole proxy URLs (which may carry user
// information).
func proxyEnvURLs(h, s string) []driverapi.EnvVar {
	return []driverapi.EnvVar{
		{Name: "HTTP_PROXY", Value: h},
		{Name: "HTTPS_PROXY", Value: h},
		{Name: "ALL_PROXY", Value: s},
		{Name: "NO_PROXY", Value: ""},
		{Name: "http_proxy", Value: h},
		{Name: "https_proxy", Value: h},
		{Name: "all_proxy", Value: s},
		{Name: "no_proxy", Value: ""},
	}
}

// Mediation is one command's running proxy, as core consumes it. It is an
// alias of an unnamed interface type so that a consumer declaring the same
// method set as an alias has the identical type, and Mediator.Start matches
// its interface without either package importing the other.
type Mediation = interface {
	Endpoint() driverapi.ProxyEndpoint
	Env() []driverapi.EnvVar
	Close() error
}

// Mediator starts one Proxy per command with shared settings. Its Start
// method is the network-mediation hook core calls for AllowHosts commands.
type Mediator struct {
	Injections []SecretInjection
	// TLSIntercept: see Config.TLSIntercept.
	TLSIntercept  bool
	UpstreamRoots *x509.CertPool
	Audit         func(Decision)
	Resolver      Resolver
	Dial          DialFunc
	Route         Route
	Limits        Limits
	TempDir       string
}

// Start runs a proxy for one command. It stops when the returned
// Mediation is closed or ctx ends.
func (m *Mediator) Start(ctx context.Context, sessionID, commandID string, hosts []string, secrets map[string]string) (Mediation, error) {
	p, err := m.StartProxy(ctx, sessionID, commandID, hosts, secrets)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// StartProxy is Start returning the concrete *Proxy.
func (m *Mediator) StartProxy(ctx context.Context, sessionID, commandID string, hosts []string, secrets map[string]string) (*Proxy, error) {
	return New(ctx, Config{
		SessionID: sessionID, CommandID: commandID,
		Hosts: hosts, Secrets: secrets, Injections: m.Injections,
		TLSIntercept: m.TLSIntercept, UpstreamRoots: m.UpstreamRoots,
		Audit: m.Audit, Resolver: m.Resolver, Dial: m.Dial,
		Route: m.Route, Limits: m.Limits, TempDir: m.TempDir,
	})
}
