//go:build linux

package bwrap

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// The plan cache keeps decoded JSON only: every decode still checks the
// plan against the host now, and what one caller does to its plan never
// reaches the next.
func TestPlanCacheChecksEveryTime(t *testing.T) {
	ws := newWorkspace(t)
	sub := filepath.Join(ws, "sub")
	if err := os.Mkdir(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	p, err := buildPlan(driverapi.ProfileRequest{Workspace: ws, Cwd: sub,
		Capabilities: driverapi.Capabilities{FSRead: []string{"/usr/share"}}})
	if err != nil {
		t.Fatal(err)
	}
	data, err := json.Marshal(p)
	if err != nil {
		t.Fatal(err)
	}
	var c planCache
	first, err := c.decode(data)
	if err != nil {
		t.Fatal(err)
	}
	want, err := decodePlan(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(first, want) {
		t.Fatalf("cached decode differs from DecodePlan:\n%+v\n%+v", first, want)
	}
	// A caller changes its plan in place.
	first.FSRead[0] = "/etc"
	first.System[0].Src = "/elsewhere"
	again, err := c.decode(data)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again, want) {
		t.Fatalf("a caller's change reached the cache:\n%+v", again)
	}
	// The host changes: the cached plan is refused as decodePlan refuses it.
	if err := os.Remove(sub); err != nil {
		t.Fatal(err)
	}
	_, err = c.decode(data)
	var pe *driverapi.ProfileError
	if !errors.As(err, &pe) {
		t.Fatalf("a plan whose cwd is gone: %v, want a ProfileError", err)
	}
	if _, derr := decodePlan(data); derr == nil || derr.Error() != err.Error() {
		t.Fatalf("the cache says %v, DecodePlan %v", err, derr)
	}
}
