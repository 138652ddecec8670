//go:build linux

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	hostv1 "github.com/aleph-sandbox/aleph-sandbox/service/api/hostv1"
)

// streamedOutputSize is the output of the streamed-output tests: 5 MiB,
// five times the default output ceiling, so a copy of it held by the
// service would stand out of its memory.
const streamedOutputSize = 5 << 20

// bigOutputArgv writes streamedOutputSize bytes of pattern to stdout
// (repeated) and "done" to stderr, without a subprocess.
func bigOutputArgv(pattern string) []string {
	return []string{"/usr/bin/python3", "-c", fmt.Sprintf(
		"import sys; p=%s; n=%d; sys.stdout.buffer.write((p*(n//len(p)+1))[:n]); sys.stdout.flush(); sys.stderr.write('done')",
		pattern, streamedOutputSize)}
}

func bigOutput(pattern []byte) []byte {
	return bytes.Repeat(pattern, streamedOutputSize/len(pattern)+1)[:streamedOutputSize]
}

// TestServeStreamedOutputSentOnce: a command's output travels once. 5 MiB
// of output (every byte value) arrives whole and byte-exact from the
// chunks; the final message on the wire does not repeat it (its stdout and
// stderr are empty, output_streamed is set and the streamed counts are the
// output's size, so a client tells "streamed" from "empty"); the service
// never held more than a few chunks of it at once (the held-bytes metric's
// maximum) and its peak RSS grew by less than 4 times the output (the
// garbage of the JSON encoding; holding it grew it by 7 times). `exec
// --host` (raw and --json) gives the same bytes as in-process exec. The
// control: a command with no output reports output_streamed with zero
// counts, and an empty output stays empty.
func TestServeStreamedOutputSentOnce(t *testing.T) {
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("/usr/bin/python3 is not installed: it writes the output")
	}
	h := newServeHarness(t)
	ml, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	metricsAddr := ml.Addr().String()
	ml.Close()
	sock := filepath.Join(t.TempDir(), "run", "aleph.sock")
	// 5 MiB is above the default ceiling (serve.max_output_bytes, 1 MiB).
	srv := h.start(t, sock, fmt.Sprintf("[serve]\nmax_output_bytes = 16777216\nmetrics_listen = \"tcp:%s\"\n", metricsAddr))
	pid := srv.cmd.Process.Pid
	c := client(sock)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// Control: no output is "streamed, nothing", not a missing field.
	o := execute(ctx, c, &hostv1.ExecuteRequest{Session: "s-out", Argv: []string{"/bin/true"}}, nil)
	if o.err != nil || o.wire == nil || !o.wire.GetOutputStreamed() || o.wire.GetStreamedStdoutBytes() != 0 ||
		len(o.result.GetStdout()) != 0 || len(o.chunks) != 0 {
		t.Fatalf("/bin/true: err %v wire %+v chunks %d\n%s", o.err, o.wire, len(o.chunks), srv.stderr)
	}
	baseHWM := procStatusKB(pid, "VmHWM")

	pattern := make([]byte, 256)
	for i := range pattern {
		pattern[i] = byte(i)
	}
	want := bigOutput(pattern)
	o = execute(ctx, c, &hostv1.ExecuteRequest{Session: "s-out", Argv: bigOutputArgv("bytes(range(256))"), MaxOutput: 16 << 20}, nil)
	if o.err != nil || o.wire == nil {
		t.Fatalf("5 MiB: %v\n%s", o.err, srv.stderr)
	}
	w := o.wire
	if len(w.GetStdout()) != 0 || len(w.GetStderr()) != 0 || !w.GetOutputStreamed() ||
		w.GetStreamedStdoutBytes() != streamedOutputSize || w.GetStreamedStderrBytes() != 4 || w.GetTruncated() || w.GetExitCode() != 0 {
		t.Fatalf("the final message: stdout %d bytes, stderr %d bytes, output_streamed %v, streamed %d/%d, truncated %v, exit %d; "+
			"want nothing repeated, output_streamed, %d/4 streamed",
			len(w.GetStdout()), len(w.GetStderr()), w.GetOutputStreamed(), w.GetStreamedStdoutBytes(), w.GetStreamedStderrBytes(),
			w.GetTruncated(), w.GetExitCode(), streamedOutputSize)
	}
	if !bytes.Equal(o.result.GetStdout(), want) || string(o.result.GetStderr()) != "done" {
		t.Fatalf("assembled from the chunks: stdout %d bytes (equal %v), stderr %q", len(o.result.GetStdout()),
			bytes.Equal(o.result.GetStdout(), want), o.result.GetStderr())
	}
	m := scrape(t, metricsAddr)
	peak, now := m["aleph_sandbox_execute_output_held_bytes_max"], m["aleph_sandbox_execute_output_held_bytes"]
	// One chunk in flight is 32 KiB (the driver's chunk); 256 KiB leaves
	// room for both streams and a copy, and is a twentieth of the output.
	if peak <= 0 || peak > 256<<10 || now != 0 {
		t.Errorf("held output: at most %v bytes at once (want 1..256 KiB: chunks in flight, never the output), %v now (want 0)", peak, now)
	}
	// Peak RSS also counts the garbage of encoding 5 MiB as JSON chunks
	// until the collector runs (measured here: +12 MiB now, +37 MiB when
	// the output was held for the result and repeated in it), so the
	// bound is generous; the metric above is the exact account.
	grew := procStatusKB(pid, "VmHWM") - baseHWM
	t.Logf("serve's peak RSS grew by %d KiB for a %d KiB output; at most %v bytes of it held at once", grew, streamedOutputSize/1024, peak)
	if grew > 4*streamedOutputSize/1024 {
		t.Errorf("serve's peak RSS grew by %d KiB for a %d KiB output: want below 4 times the output", grew, streamedOutputSize/1024)
	}

	// The CLI through the service: the raw bytes, and --json.
	cli := func(args ...string) ([]byte, []byte) {
		t.Helper()
		cmd := exec.CommandContext(ctx, filepath.Join(h.bin, "aleph-sandbox"), append([]string{"exec", "--host", "unix:" + sock,
			"--session", "s-out", "--max-output", "16777216"}, args...)...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("exec --host %v: %v\n%s", args, err, stderr.String())
		}
		return stdout.Bytes(), stderr.Bytes()
	}
	if out, errOut := cli(append([]string{"--"}, bigOutputArgv("bytes(range(256))")...)...); !bytes.Equal(out, want) || string(errOut) != "done" {
		t.Errorf("exec --host: stdout %d bytes (equal %v), stderr %q", len(out), bytes.Equal(out, want), errOut)
	}
	ascii := bigOutput([]byte("0123456789abcdef"))
	out, _ := cli(append([]string{"--json", "--"}, bigOutputArgv("b'0123456789abcdef'")...)...)
	var res struct {
		Stdout, Stderr string
		ExitCode       *int `json:"exit_code"`
	}
	if err := json.Unmarshal(out, &res); err != nil {
		t.Fatalf("exec --host --json: %v: %.200s", err, out)
	}
	if res.Stdout != string(ascii) || res.Stderr != "done" || res.ExitCode == nil || *res.ExitCode != 0 {
		t.Errorf("exec --host --json: stdout %d bytes (equal %v), stderr %q", len(res.Stdout), res.Stdout == string(ascii), res.Stderr)
	}
}
