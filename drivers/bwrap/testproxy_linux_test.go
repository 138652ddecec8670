//go:build linux

package bwrap

import (
	"bufio"
	"encoding/json"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// hostProxy is the managed proxy (core/proxy/testproxy) running as a
// program: this package may not import the proxy, and meets it where the
// bridge meets it in production, at its unix socket.
type hostProxy struct {
	UnixSocket string `json:"unix_socket"`
	Env        []struct {
		Name  string `json:"name"`
		Value string `json:"value"`
	} `json:"env"`
}

// startHostProxy starts the proxy allowing hosts on the bridge route; it
// is stopped (its socket removed) when tb ends.
func startHostProxy(tb testing.TB, hosts ...string) hostProxy {
	tb.Helper()
	bin := filepath.Join(filepath.Dir(driverBin), "testproxy") // built by TestMain
	args := []string{"--route", "bridge"}
	for _, h := range hosts {
		args = append(args, "--host", h)
	}
	cmd := exec.Command(bin, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	stopped := make(chan struct{})
	tb.Cleanup(func() {
		stdin.Close() // the proxy ends when its stdin closes
		select {
		case <-stopped:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-stopped
		}
	})
	var p hostProxy
	line, err := bufio.NewReader(stdout).ReadBytes('\n')
	go func() { _ = cmd.Wait(); close(stopped) }()
	if err != nil {
		tb.Fatalf("testproxy did not start: %v", err)
	}
	if err := json.Unmarshal(line, &p); err != nil || p.UnixSocket == "" {
		tb.Fatalf("testproxy said %q: %v", line, err)
	}
	return p
}
