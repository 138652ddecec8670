package bwrap

import (
	"errors"
	"reflect"
	"strconv"
	"strings"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// configSection is the name of the driver's configuration section,
// [sandbox.linux].
const configSection = "linux"

// configFields describes every key of options. A test holds it to the
// struct's JSON tags, so a key cannot be added without its description; the
// defaults are the constants the driver applies, so the schema (and the
// docs, which a test holds to it) cannot drift from them.
func configFields() []driverapi.ConfigField {
	return []driverapi.ConfigField{
		{Name: "max_pids", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultMaxPids),
			Description: "processes and threads per command; 0 means no limit"},
		{Name: "cpu_quota_percent", Type: driverapi.ConfigUint, DefaultJSON: "0",
			Description: "CPU time as a percentage of one core (50 = half a core); 0 means no cap"},
		{Name: "cgroup", Type: driverapi.ConfigString, DefaultJSON: strconv.Quote(string(cgroupAuto)), Enum: []string{"auto", "v2", "v1", "none"},
			Description: "how limits are enforced: auto picks v2 where delegated, else v1 where writable"},
		{Name: "bwrap_path", Type: driverapi.ConfigString, DefaultJSON: `""`,
			Description: "absolute path of bubblewrap; empty means bwrap on PATH"},
		{Name: "protected_scan_max_entries", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultProtectedScanMaxEntries),
			Description: "directory entries one command's search for nested .git entries may visit; a larger tree is refused; 0 means the default"},
		{Name: "protected_scan_timeout_ms", Type: driverapi.ConfigUint, DefaultJSON: strconv.FormatInt(defaultProtectedScanTimeout.Milliseconds(), 10),
			Description: "how long that search may take; 0 means the default"},
		{Name: "fallback", Type: driverapi.ConfigString, DefaultJSON: strconv.Quote(string(fallbackNone)), Enum: []string{"none", "landlock"},
			Description: "where bwrap cannot create namespaces (containers): none fails closed; landlock runs commands confined by Landlock and seccomp alone, without a private /tmp, /proc or PID namespace and without protected_paths"},
		{Name: "tmpfs_max_mb", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultTmpfsMaxMB),
			Description: "MiB a command's writable tmpfs mounts (/tmp, /dev/shm) hold together, never more than its memory limit; 0 means the default"},
		{Name: "prepared", Type: driverapi.ConfigString, DefaultJSON: strconv.Quote(string(preparedAuto)), Enum: []string{"auto", "always", "off"},
			Description: "sandboxes built before their command: auto keeps some ready for a profile used twice; always runs every command through one (built on the spot when none waits); off builds each sandbox for its command"},
		{Name: "prepared_per_profile", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultPreparedPerProfile),
			Description: "prepared sandboxes kept ready per profile and session; 0 keeps none"},
		{Name: "prepared_max", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultPreparedMax),
			Description: "prepared sandboxes waiting or being built, in all; 0 means the default"},
		{Name: "prepared_idle_ms", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultPreparedIdleMS),
			Description: "how long a prepared sandbox waits for a command before it is destroyed; 0 means the default"},
		{Name: "session_sandbox", Type: driverapi.ConfigString, DefaultJSON: strconv.Quote(string(sessionSandboxAuto)), Enum: []string{"auto", "off", "always"},
			Description: "session sandboxes: auto runs the commands whose host asks for it in one persistent sandbox per session and profile (root driver, bwrap tier); off gives every command a sandbox of its own; always does so for every command of a session, asked or not (the test suites' second pass)"},
		{Name: "session_idle_ms", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultSessionIdleMS),
			Description: "how long a session sandbox lives without a command before it is ended; 0 means the default"},
		{Name: "session_placeholders", Type: driverapi.ConfigString, DefaultJSON: strconv.Quote(sessionPlaceholdersCommand), Enum: []string{"command", "session"},
			Description: "how long the placeholders of missing protected entries stay on the host for a session sandbox's commands: command makes and removes them for each command; session keeps them (and the protected entries found) until the session sandbox ends, and a command only checks that the workspace did not change (faster; the placeholders are visible on the host between commands)"},
		{Name: "session_ahead", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultSessionAhead),
			Description: "session sandboxes kept built ahead per recently used profile (at most 4 profiles), each taken whole by the first command of one new session and never by another, kept only while the driver holds a session sandbox; 0 builds none ahead"},
		{Name: "session_ahead_idle_ms", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultSessionAheadIdleMS),
			Description: "how long a session sandbox built ahead waits for a new session before it is ended; 0 means the default"},
		{Name: "max_session_networks", Type: driverapi.ConfigUint, DefaultJSON: strconv.Itoa(defaultMaxSessionNetworks),
			Description: "network namespaces held for sessions at once; past it a command needing one is refused (resource_exhausted); 0 means the default"},
	}
}

// schema describes the driver's configuration section.
func schema() driverapi.ConfigSchema {
	return driverapi.ConfigSchema{Section: configSection, Fields: configFields()}
}

// optionKeys are the JSON names of options' fields.
func optionKeys() []string {
	var keys []string
	t := reflect.TypeOf(options{})
	for i := range t.NumField() {
		name, _, _ := strings.Cut(t.Field(i).Tag.Get("json"), ",")
		keys = append(keys, name)
	}
	return keys
}

// validateConfig checks a [sandbox.linux] section given as one JSON object
// exactly as the driver would take it, and says which key is wrong.
func validateConfig(configJSON []byte) (options, error) {
	o, err := parseOptions(string(configJSON))
	if err != nil {
		return options{}, toConfigError(err)
	}
	return o, nil
}

// toConfigError names the key an options error is about.
func toConfigError(err error) error {
	var oe *optionsError
	if !errors.As(err, &oe) {
		return &driverapi.ConfigError{Section: configSection, Reason: err.Error()}
	}
	key := oe.Key
	if key == "" {
		// Unknown keys come from encoding/json, which names them in its
		// message; it is this package's own decoder, not a peer's text.
		if _, rest, ok := strings.Cut(oe.Reason, `unknown field "`); ok {
			key, _, _ = strings.Cut(rest, `"`)
			return &driverapi.ConfigError{Section: configSection, Key: key, Reason: "unknown key (known: " + strings.Join(optionKeys(), ", ") + ")"}
		}
	}
	return &driverapi.ConfigError{Section: configSection, Key: key, Reason: oe.Reason}
}
