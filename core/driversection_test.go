package core

import "testing"

// The platform section goes to this project's drivers only; any other
// driver binary gets [sandbox.drivers.NAME], NAME from aleph-driver-NAME.
func TestDriverOptionsRoutedByName(t *testing.T) {
	cfg := DefaultConfig()
	cfg.Sandbox.Linux = Section{"max_pids": 50}
	cfg.Sandbox.Drivers = map[string]Section{"runc": {"image": "alpine"}}
	for path, want := range map[string]string{
		"/opt/x/aleph-driver-bwrap":    `{"max_pids":50}`,
		"/opt/x/aleph-driver-runc":     `{"image":"alpine"}`,
		"/opt/x/aleph-driver-runc.exe": `{"image":"alpine"}`,
		"/opt/x/aleph-driver-other":    `{}`,
		"/opt/x/my-driver":             `{}`,
	} {
		if got := string(cfg.DriverOptionsFor(path, "linux")); got != want {
			t.Errorf("%s: %s, want %s", path, got, want)
		}
	}
	for name, want := range map[string]string{"linux": "sandbox.linux", "windows": "sandbox.windows", "runc": "sandbox.drivers.runc"} {
		if got := SectionKey(name); got != want {
			t.Errorf("SectionKey(%q) = %q, want %q", name, got, want)
		}
	}
}
