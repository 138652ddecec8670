//go:build linux

package bwrap

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// cacheDriver is a driver probing with state directory dir and, as extra
// key input, the file keyFile (created if missing).
func cacheDriver(t *testing.T, dir, keyFile string, o options, driverBinary string) *Driver {
	t.Helper()
	if driverBinary == "" {
		driverBinary = driverBin
	}
	d, err := newDriver(config{Options: o, InitBinary: driverBin, DriverBinary: driverBinary, StateDir: dir,
		probeKeyExtra: []string{keyFile}})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// freshProbe probes with d and fails unless a sandbox can be built here
// (the cache only ever holds a working bwrap).
func freshProbe(t *testing.T, d *Driver) *hostProbe {
	t.Helper()
	h := d.probe()
	if h.sandboxErr != nil {
		t.Skipf("no sandbox here: %v", h.sandboxErr)
	}
	if h.tier != tierBwrap {
		t.Skipf("tier %s: no trial sandbox to cache", h.tier)
	}
	return h
}

func cacheFile(dir string) string { return filepath.Join(dir, probeCacheName) }

// filtered reports whether this process runs under a seccomp filter (the
// test scripts' nolandlock and nonamespaces modes), where the probe cache
// is off by design.
func filtered(t *testing.T) bool {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	return !unfilteredProcess(string(status))
}

// needsCache skips a test of the cache's use where the cache is off by
// design (TestProbeCacheOffUnderSeccomp covers that case).
func needsCache(t *testing.T) {
	t.Helper()
	if filtered(t) {
		t.Skip("this process runs under a seccomp filter: the probe cache is off by design")
	}
}

// Under a seccomp filter the driver neither reads nor writes the record,
// and says why; its probe runs the trials (and still finds what they find).
func TestProbeCacheOffUnderSeccomp(t *testing.T) {
	if !filtered(t) {
		t.Skip("no seccomp filter on this process (scripts/test-nolandlock.sh runs this under one)")
	}
	dir, key := t.TempDir(), filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	d := cacheDriver(t, dir, key, options{}, "")
	h := d.probe()
	if h.probeCached || !strings.Contains(h.probeCacheWhy, "seccomp filter") {
		t.Fatalf("cache used %v, why %q: want off, for the filter", h.probeCached, h.probeCacheWhy)
	}
	if _, err := os.Lstat(cacheFile(dir)); !os.IsNotExist(err) {
		t.Fatalf("a filtered driver wrote the record: %v", err)
	}
}

// writeRecord writes rec with a correct checksum, 0600.
func writeRecord(t *testing.T, path string, rec probeRecord) {
	t.Helper()
	rec.Sum = ""
	body, err := json.Marshal(rec)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(body)
	rec.Sum = hex.EncodeToString(s[:])
	out, _ := json.Marshal(rec)
	if err := os.WriteFile(path, out, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o600); err != nil {
		t.Fatal(err)
	}
}

func readRecord(t *testing.T, path string) probeRecord {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec probeRecord
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	return rec
}

// A probe records what its trials confirmed (0600, in the state
// directory); the next driver start skips the trials on its word, finds
// the same setup, and its sandbox works (positive control).
func TestProbeCacheUsedByTheNextStart(t *testing.T) {
	needsCache(t)
	dir, key := t.TempDir(), filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	h1 := freshProbe(t, cacheDriver(t, dir, key, options{}, ""))
	if h1.probeCached {
		t.Fatal("the first probe of an empty state directory claims the cache")
	}
	fi, err := os.Lstat(cacheFile(dir))
	if err != nil {
		t.Fatalf("no probe cache written: %v", err)
	}
	if fi.Mode().Perm() != 0o600 || !fi.Mode().IsRegular() {
		t.Fatalf("probe cache mode %v, want a 0600 file", fi.Mode())
	}
	d2 := cacheDriver(t, dir, key, options{}, "")
	h2 := freshProbe(t, d2)
	if !h2.probeCached {
		t.Fatalf("the second start ran its trials again (%s)", h2.probeCacheWhy)
	}
	if h2.bwrap != h1.bwrap || h2.bwrapVersion != h1.bwrapVersion || h2.guard != h1.guard || !slices.Equal(h2.userns, h1.userns) ||
		h2.sessionUser != h1.sessionUser || h2.sessionOverlayWhy != h1.sessionOverlayWhy {
		t.Fatalf("cached probe %+v differs from the fresh one %+v", h2, h1)
	}
	caps, err := d2.Capabilities(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if caps.Details["host_probe"] == "" || caps.Details["bwrap_version"] != h1.bwrapVersion {
		t.Fatalf("report: host_probe %q, bwrap_version %q", caps.Details["host_probe"], caps.Details["bwrap_version"])
	}
	ws := newWorkspace(t)
	r := drvRun(t, context.Background(), d2, ws, driverapi.Capabilities{}, nil, "/bin/echo", "ran")
	if r.err != nil || r.exit.ExitCode != 0 || r.stdout != "ran\n" {
		t.Fatalf("a command on the cached probe: %+v", r)
	}
}

// Any change of the key refuses the record: a host file in the key, the
// bwrap binary, the driver binary. Each time the probe runs its trials
// again, and its new record serves the start after it.
func TestProbeCacheKeyChangeRefusesIt(t *testing.T) {
	needsCache(t)
	tmp := t.TempDir()
	bw := filepath.Join(tmp, "bwrap")
	sys, err := exec.LookPath("bwrap")
	if err != nil {
		t.Skip("no bwrap on PATH")
	}
	copyBinary(t, sys, bw)
	drv := filepath.Join(tmp, "aleph-driver-bwrap")
	copyBinary(t, driverBin, drv)
	key := filepath.Join(tmp, "key")
	if err := os.WriteFile(key, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(tmp, "state")
	o := options{BwrapPath: bw}
	start := func() *hostProbe { return freshProbe(t, cacheDriver(t, dir, key, o, drv)) }
	start()
	if h := start(); !h.probeCached {
		t.Fatalf("control: an unchanged key does not use the record (%s)", h.probeCacheWhy)
	}
	later := time.Now().Add(time.Minute)
	for _, c := range []struct {
		name   string
		change func()
	}{
		{"a host file in the key", func() {
			if err := os.WriteFile(key, []byte("b"), 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"the bwrap binary", func() {
			if err := os.Chtimes(bw, later, later); err != nil {
				t.Fatal(err)
			}
		}},
		{"the driver binary", func() {
			if err := os.Chtimes(drv, later, later); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		c.change()
		if h := start(); h.probeCached {
			t.Errorf("%s changed: the old record was used", c.name)
		}
		if h := start(); !h.probeCached {
			t.Errorf("%s changed: the new record is not used (%s)", c.name, h.probeCacheWhy)
		}
	}
}

// A record that is corrupt, tampered with, not private, not the driver's
// own or not a plain file is ignored: the probe runs its trials and
// reports what they find. The untouched record is used (control).
func TestProbeCacheTamperedIsIgnored(t *testing.T) {
	needsCache(t)
	dir, key := t.TempDir(), filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	h0 := freshProbe(t, cacheDriver(t, dir, key, options{}, ""))
	path := cacheFile(dir)
	good, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rec := readRecord(t, path)
	restore := func() {
		_ = os.Remove(path)
		if err := os.WriteFile(path, good, 0o600); err != nil {
			t.Fatal(err)
		}
		_ = os.Chmod(dir, 0o700)
	}
	cases := []struct {
		name   string
		tamper func()
		root   bool // needs root (chown)
	}{
		{"the version edited, checksum stale", func() {
			var m map[string]any
			_ = json.Unmarshal(good, &m)
			m["bwrap_version"] = "9.9.9"
			b, _ := json.Marshal(m)
			_ = os.WriteFile(path, b, 0o600)
		}, false},
		{"an unknown trial, checksum fixed", func() {
			r := rec
			r.BwrapVersion = "9.9.9"
			r.Trials = append(slices.Clone(r.Trials), "guard=bogus")
			writeRecord(t, path, r)
		}, false},
		{"an unknown field", func() {
			var m map[string]any
			_ = json.Unmarshal(good, &m)
			m["extra"] = true
			b, _ := json.Marshal(m)
			_ = os.WriteFile(path, b, 0o600)
		}, false},
		{"garbage", func() { _ = os.WriteFile(path, []byte("{\x00not json"), 0o600) }, false},
		{"readable by others", func() { _ = os.Chmod(path, 0o644) }, false},
		{"a symlink to a good record", func() {
			other := filepath.Join(t.TempDir(), "rec")
			_ = os.WriteFile(other, good, 0o600)
			_ = os.Remove(path)
			_ = os.Symlink(other, path)
		}, false},
		{"the state directory writable by others", func() { _ = os.Chmod(dir, 0o777) }, false},
		{"owned by another user", func() { _ = os.Chown(path, 65534, 65534) }, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.root && os.Geteuid() != 0 {
				t.Skip("chown to another user needs root")
			}
			restore()
			if h := freshProbe(t, cacheDriver(t, dir, key, options{}, "")); !h.probeCached {
				t.Fatalf("control: the untouched record is not used (%s)", h.probeCacheWhy)
			}
			restore()
			c.tamper()
			h := freshProbe(t, cacheDriver(t, dir, key, options{}, ""))
			if h.probeCached {
				t.Fatal("the tampered record was trusted")
			}
			if h.bwrapVersion != h0.bwrapVersion {
				t.Fatalf("version %q, want %q from bwrap itself", h.bwrapVersion, h0.bwrapVersion)
			}
		})
	}
}

// The record can only let a trial be skipped, never pick the setup: a
// well-formed record of this very key confirming only a weaker setup (no
// PID guard) than the one the probe picks makes the probe run its trial
// for the setup it picked, which it then uses.
func TestProbeCacheNeverPicksTheSetup(t *testing.T) {
	needsCache(t)
	dir, key := t.TempDir(), filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	h0 := freshProbe(t, cacheDriver(t, dir, key, options{}, ""))
	if h0.guard.mode == guardNone {
		t.Skipf("the probe picks no guard here (%s): nothing weaker to offer", h0.guard.why)
	}
	rec := readRecord(t, cacheFile(dir))
	rec.Trials = []string{trialGuard(guardNone), trialUserns(guardNone)}
	writeRecord(t, cacheFile(dir), rec)
	if r, ok := readProbeRecord(cacheFile(dir), dir); !ok || r.Key != rec.Key {
		t.Fatal("control: the forged record does not pass the checks, so the test would prove nothing")
	}
	h := freshProbe(t, cacheDriver(t, dir, key, options{}, ""))
	if h.probeCached {
		t.Fatal("a record confirming another setup let the trial be skipped")
	}
	if h.guard.mode != h0.guard.mode || !slices.Equal(h.userns, h0.userns) {
		t.Fatalf("setup %v %v, want the probe's own %v %v", h.guard, h.userns, h0.guard, h0.userns)
	}
}

// A driver under a seccomp filter neither reads nor writes the record.
func TestUnfilteredProcess(t *testing.T) {
	for status, want := range map[string]bool{
		"Name:\tx\nNoNewPrivs:\t0\nSeccomp:\t0\nSeccomp_filters:\t0\n": true,
		"Name:\tx\nNoNewPrivs:\t1\nSeccomp:\t2\nSeccomp_filters:\t1\n": false,
		"Name:\tx\n": false,
	} {
		if got := unfilteredProcess(status); got != want {
			t.Errorf("unfilteredProcess(%q) = %v, want %v", status, got, want)
		}
	}
}

// A sandbox that fails its setup on a cached probe removes the record;
// another error leaves it (control).
func TestProbeCacheForgottenOnSetupFailure(t *testing.T) {
	needsCache(t)
	dir, key := t.TempDir(), filepath.Join(t.TempDir(), "key")
	if err := os.WriteFile(key, []byte("a"), 0o600); err != nil {
		t.Fatal(err)
	}
	freshProbe(t, cacheDriver(t, dir, key, options{}, ""))
	d := cacheDriver(t, dir, key, options{}, "")
	if h := freshProbe(t, d); !h.probeCached {
		t.Fatalf("control: the record is not used (%s)", h.probeCacheWhy)
	}
	d.forgetProbeCache(context.Canceled)
	if _, err := os.Stat(cacheFile(dir)); err != nil {
		t.Fatalf("an error that is no setup failure removed the record: %v", err)
	}
	d.forgetProbeCache(&setupError{Status: "exit status 1", Message: "bwrap: No permissions to create new namespace"})
	if _, err := os.Stat(cacheFile(dir)); !os.IsNotExist(err) {
		t.Fatalf("the record survived a setup failure: %v", err)
	}
}

func copyBinary(t *testing.T, src, dst string) {
	t.Helper()
	in, err := os.Open(src)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(out, in); err != nil {
		t.Fatal(err)
	}
	if err := out.Close(); err != nil {
		t.Fatal(err)
	}
}
