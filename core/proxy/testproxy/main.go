// Command testproxy runs the managed network proxy as a program of its own,
// for tests of the code on the other side of the proxy's unix socket (the
// Linux driver's bridge), which may not import the proxy: they start it as
// they start any other real component and speak to it over its socket, as
// the bridge does in production.
//
// Usage: testproxy [--route bridge|host_loopback] --host HOST[:PORT]...
//
// When the proxy listens it writes one JSON line to stdout:
// {"unix_socket": PATH, "env": [{"name": N, "value": V}, ...]}, the
// endpoint and the child's proxy variables. It serves until its stdin
// closes or it gets SIGTERM or SIGINT, then closes the proxy (which removes
// its socket) and exits 0.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/aleph-sandbox/aleph-sandbox/core/proxy"
)

type hosts []string

func (h *hosts) String() string     { return fmt.Sprint(*h) }
func (h *hosts) Set(v string) error { *h = append(*h, v); return nil }

type ready struct {
	UnixSocket string   `json:"unix_socket"`
	Env        []envVar `json:"env"`
}

type envVar struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "testproxy:", err)
		os.Exit(1)
	}
}

func run() error {
	var allow hosts
	route := flag.String("route", "bridge", "the route the proxy's variables describe: bridge or host_loopback")
	flag.Var(&allow, "host", "an allowed HOST[:PORT] (repeat)")
	flag.Parse()
	cfg := proxy.Config{Hosts: allow}
	switch *route {
	case "bridge":
		cfg.Route = proxy.RouteBridge
	case "host_loopback":
		cfg.Route = proxy.RouteHostLoopback
	default:
		return fmt.Errorf("--route %q: want bridge or host_loopback", *route)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	p, err := proxy.New(ctx, cfg)
	if err != nil {
		return err
	}
	defer p.Close()
	r := ready{UnixSocket: p.Endpoint().UnixSocket}
	for _, e := range p.Env() {
		r.Env = append(r.Env, envVar{Name: e.Name, Value: e.Value})
	}
	if err := json.NewEncoder(os.Stdout).Encode(r); err != nil {
		return err
	}
	go func() { _, _ = io.Copy(io.Discard, os.Stdin); stop() }()
	<-ctx.Done()
	return nil
}
