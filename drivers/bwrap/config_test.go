package bwrap

import (
	"errors"
	"slices"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The schema must describe every key the driver accepts, and no other.
func TestSchemaMatchesOptions(t *testing.T) {
	var names []string
	for _, f := range schema().Fields {
		names = append(names, f.Name)
		if f.Description == "" || f.Type == "" {
			t.Errorf("field %s has no description or type", f.Name)
		}
	}
	keys := optionKeys()
	slices.Sort(names)
	slices.Sort(keys)
	if !slices.Equal(names, keys) {
		t.Fatalf("schema fields %v, Options keys %v", names, keys)
	}
}

func TestValidateConfigNamesTheKey(t *testing.T) {
	cases := []struct{ in, key string }{
		{`{"colour": "red"}`, "colour"},
		{`{"cgroup": "v3"}`, "cgroup"},
		{`{"max_pids": 99999999}`, "max_pids"},
		{`{"bwrap_path": "bin/bwrap"}`, "bwrap_path"},
		{`{"cpu_quota_percent": 9999999}`, "cpu_quota_percent"},
	}
	for _, c := range cases {
		_, err := validateConfig([]byte(c.in))
		var ce *driverapi.ConfigError
		if !errors.As(err, &ce) || ce.Section != configSection || ce.Key != c.key {
			t.Errorf("%s: want ConfigError on %s, got %T %v", c.in, c.key, err, err)
		}
	}
	// Positive controls.
	for _, in := range []string{``, `{}`, `{"max_pids": 0, "cgroup": "v1", "cpu_quota_percent": 50}`} {
		if _, err := validateConfig([]byte(in)); err != nil {
			t.Errorf("%q refused: %v", in, err)
		}
	}
}
