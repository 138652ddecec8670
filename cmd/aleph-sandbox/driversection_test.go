package main

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
	"github.com/aleph-sandbox/aleph-sandbox/driverapi/drivertest"
)

// optionsDriver is a third-party driver as the docs tell one to be
// written, without the config call: it reads ALEPH_DRIVER_OPTIONS at
// start, knows one key ("image"), and for any other key serves on but
// claims nothing (naming the key) and runs nothing. It prints the options
// it was started with, so a test sees what reached it.
type optionsDriver struct {
	drivertest.FakeDriver
	refused string
}

// configOptionsDriver adds the config call: its section is
// [sandbox.drivers.thirdparty], and SetConfig refuses any key but "image".
type configOptionsDriver struct{ *optionsDriver }

func (configOptionsDriver) ConfigSchema(context.Context) (driverapi.ConfigSchema, error) {
	return driverapi.ConfigSchema{Section: "thirdparty", Fields: []driverapi.ConfigField{{Name: "image", Type: driverapi.ConfigString}}}, nil
}

func (configOptionsDriver) SetConfig(_ context.Context, b []byte) error {
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return &driverapi.ConfigError{Section: "drivers.thirdparty", Reason: err.Error()}
	}
	for k := range m {
		if k != "image" {
			return &driverapi.ConfigError{Section: "drivers.thirdparty", Key: k, Reason: "unknown key (known: image)"}
		}
	}
	return nil
}

func serveOptionsDriver(withConfig bool) {
	raw := os.Getenv("ALEPH_DRIVER_OPTIONS")
	d := &optionsDriver{}
	d.Stdout = []byte("options=" + raw + "\n")
	var m map[string]any
	if err := json.Unmarshal([]byte(raw), &m); err != nil {
		d.refused = "ALEPH_DRIVER_OPTIONS is not a JSON object"
	}
	var keys []string
	for k := range m {
		if k != "image" {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	if len(keys) > 0 {
		d.refused = "unknown key " + strings.Join(keys, ", ") + " in ALEPH_DRIVER_OPTIONS"
	}
	if withConfig {
		driverapi.Serve(configOptionsDriver{d})
		return
	}
	driverapi.Serve(d)
}

func (d *optionsDriver) Capabilities(ctx context.Context) (driverapi.HostCapabilities, error) {
	c := drivertest.FullCapabilities()
	c.Backend = "thirdparty"
	if d.refused != "" {
		for _, f := range c.Features {
			c.Unavailable = append(c.Unavailable, driverapi.Unavailable{Feature: f, Reason: d.refused})
		}
		c.Features = nil
	}
	return c, nil
}

func (d *optionsDriver) Run(ctx context.Context, spec driverapi.RunSpec, s driverapi.Streams) (driverapi.Exit, error) {
	if d.refused != "" {
		return driverapi.Exit{}, errors.New(d.refused)
	}
	return d.FakeDriver.Run(ctx, spec, s)
}

// A third-party driver gets its own section, [sandbox.drivers.NAME], in
// ALEPH_DRIVER_OPTIONS, never the platform section's keys (which belong to
// this project's driver, and which it would refuse, running nothing); and
// doctor says which section the driver is handed, and fails when the
// platform section holds keys no driver then reads.
func TestDriverSectionRouting(t *testing.T) {
	if goos() != "linux" {
		t.Skip("the platform section under test is [sandbox.linux]")
	}
	exe := cliEnv(t)
	t.Setenv("ALEPH_CLI_TEST_DRIVER", "options")
	dir := t.TempDir()
	drv := filepath.Join(dir, "aleph-driver-thirdparty")
	if err := os.Symlink(exe, drv); err != nil {
		t.Fatal(err)
	}
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	own := "[sandbox.drivers.thirdparty]\nimage = \"alpine\"\n"
	both := write("both.toml", "[sandbox.linux]\nmax_pids = 50\n\n"+own)
	alone := write("alone.toml", own)

	// The command runs, and the driver saw its own section only.
	r := cli(t, "", false, "exec", "--driver", drv, "--config", both, "--", "anything")
	if r.code != 0 || r.stdout != `options={"image":"alpine"}`+"\n" {
		t.Fatalf("exec with a third-party driver: code %d stdout %q stderr %q, want its own section", r.code, r.stdout, r.stderr)
	}
	// Positive control: the shipped driver's name gets the platform
	// section, as before.
	shipped := filepath.Join(dir, "aleph-driver-bwrap")
	if err := os.Symlink(exe, shipped); err != nil {
		t.Fatal(err)
	}
	r = cli(t, "", false, "exec", "--driver", shipped, "--config", both, "--", "anything")
	if r.code == 0 || !strings.Contains(r.stdout+r.stderr, "max_pids") {
		t.Fatalf("the platform section did not reach the driver named bwrap: code %d stdout %q stderr %q", r.code, r.stdout, r.stderr)
	}

	// doctor: its own section alone is fine, and named.
	r = cli(t, "", false, "doctor", "--driver", drv, "--config", alone)
	if r.code != 0 || !strings.Contains(r.stdout, "config: ok\n") || !strings.Contains(r.stdout, "driver section: [sandbox.drivers.thirdparty]\n") {
		t.Fatalf("doctor, own section: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// [sandbox.linux] keys reach no driver: doctor says so and fails.
	r = cli(t, "", false, "doctor", "--driver", drv, "--config", both)
	if r.code != 1 || strings.Contains(r.stdout, "config: ok") || !strings.Contains(r.stdout, "[sandbox.linux] sets max_pids") ||
		!strings.Contains(r.stdout, "fix: move what thirdparty understands to [sandbox.drivers.thirdparty]") {
		t.Fatalf("doctor, keys of another driver: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}

// A driver that refuses its own section (through the config call) makes
// doctor fail with the refusal on its config line, not "config: ok".
func TestDoctorConfigLineTellsARefusedSection(t *testing.T) {
	if goos() != "linux" {
		t.Skip("the routing under test is the Linux platform's")
	}
	exe := cliEnv(t)
	t.Setenv("ALEPH_CLI_TEST_DRIVER", "options-config")
	dir := t.TempDir()
	drv := filepath.Join(dir, "aleph-driver-thirdparty")
	if err := os.Symlink(exe, drv); err != nil {
		t.Fatal(err)
	}
	good := filepath.Join(dir, "good.toml")
	bad := filepath.Join(dir, "bad.toml")
	if err := os.WriteFile(good, []byte("[sandbox.drivers.thirdparty]\nimage = \"alpine\"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bad, []byte("[sandbox.drivers.thirdparty]\nimage = \"alpine\"\nbogus = 1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// Positive control: the section it accepts.
	r := cli(t, "", false, "doctor", "--driver", drv, "--config", good)
	if r.code != 0 || !strings.Contains(r.stdout, "config: ok\n") || !strings.Contains(r.stdout, "driver section: [sandbox.drivers.thirdparty]\n") {
		t.Fatalf("doctor, accepted section: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	r = cli(t, "", false, "doctor", "--driver", drv, "--config", bad)
	if r.code != 1 || strings.Contains(r.stdout, "config: ok") || !strings.Contains(r.stdout, "config: ") ||
		!strings.Contains(r.stdout, "sandbox.drivers.thirdparty.bogus") {
		t.Fatalf("doctor, refused section: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
