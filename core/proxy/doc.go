// Package proxy is the managed network proxy that mediates a sandboxed
// command's egress when its network policy is an allowlist of hosts.
//
// One Proxy serves one command, and nobody else may use it: it applies
// that command's allowlist and injects that command's secrets. It listens
// on a unix socket in a private directory (the Linux driver bind-mounts it
// into the sandbox, where an in-namespace bridge relays the loopback ports
// to it), and only on the host-loopback route (backends that let the child
// reach host loopback only) also on 127.0.0.1:0, where any process on the
// host could connect, so every client there, and on that route every
// client of the unix socket too, must present the proxy's random
// credential, which the child's proxy URLs carry. On each listener
// it speaks HTTP CONNECT, plain HTTP forwarding (absolute URI) and SOCKS5
// CONNECT, told apart by the first byte a client sends.
//
// Every decision is taken on what the proxy will actually connect to: names
// are resolved by the proxy, each resolved address is vetted (loopback,
// private, link-local, CGNAT, multicast, unspecified, reserved and cloud
// metadata addresses are refused unless the allowlist names that IP literal)
// and the proxy dials exactly the vetted address, so a name cannot be
// rebound between check and use. Each allow and deny is reported to an
// audit callback; secret values never appear in a Decision.
//
// The package does not import package core: core and the CLI wire it in
// through the Mediator type.
package proxy
