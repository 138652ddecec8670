package driverapi

import (
	"errors"
	"strings"
	"testing"
)

type testPlan struct {
	Format int      `json:"format"`
	Paths  []string `json:"paths"`
}

func TestDecodePlanJSON(t *testing.T) {
	for _, tc := range []struct {
		name, data, err string
	}{
		{name: "whole", data: `{"format":1,"paths":["/a<b>"]}`},
		{name: "unknown field", data: `{"format":1,"extra":true}`, err: `unknown field "extra"`},
		{name: "second object", data: `{"format":1}{"format":2}`, err: "data after its end"},
		{name: "trailing garbage", data: `{"format":1} x`, err: "data after its end"},
		{name: "not JSON", data: `format=1`, err: "is not valid"},
		{name: "empty", data: ``, err: "is not valid"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var p testPlan
			err := DecodePlanJSON("test plan", []byte(tc.data), &p)
			if tc.err == "" {
				if err != nil || p.Format != 1 || len(p.Paths) != 1 || p.Paths[0] != "/a<b>" {
					t.Fatalf("got %+v, %v", p, err)
				}
				return
			}
			var pe *ProfileError
			if !errors.As(err, &pe) || !strings.Contains(err.Error(), tc.err) || !strings.HasPrefix(pe.Reason, "test plan ") {
				t.Fatalf("got %v, want a ProfileError about %q", err, tc.err)
			}
		})
	}
}

// Encoding is byte-stable and round-trips through the strict decoder.
func TestEncodePlanJSONRoundTrip(t *testing.T) {
	in := testPlan{Format: 1, Paths: []string{"/a<b>&c"}}
	data, err := EncodePlanJSON(in)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(data), `{"format":1,"paths":["/a<b>&c"]}`; got != want {
		t.Fatalf("encoded %s, want %s", got, want)
	}
	var out testPlan
	if err := DecodePlanJSON("plan", data, &out); err != nil || out.Paths[0] != in.Paths[0] {
		t.Fatalf("round trip: %+v, %v", out, err)
	}
}
