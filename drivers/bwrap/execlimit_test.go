package bwrap

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestExecLimitsFor(t *testing.T) {
	for _, c := range []struct {
		stack     uint64
		page      int
		total, sz uint64
	}{
		{8 << 20, 4096, 2 << 20, 128 << 10},            // the usual 8 MiB stack: a quarter
		{math.MaxUint64, 4096, 6 << 20, 128 << 10},     // unlimited: three quarters of _STK_LIM
		{64 << 20, 4096, 6 << 20, 128 << 10},           // large: the same cap
		{256 << 10, 4096, 128 << 10, 128 << 10},        // small: never below ARG_MAX
		{0, 4096, 128 << 10, 128 << 10},                // none at all: ARG_MAX
		{8 << 20, 64 << 10, 2 << 20, 2 << 20},          // 64 KiB pages: 32 of them per string
		{1<<20 + 3, 4096, (1<<20 + 3) / 4, 128 << 10},  // a quarter, rounded down
		{3 << 20, 16 << 10, 768 << 10, 512 << 10},      // 16 KiB pages
		{24 << 20, 4096, 6 << 20, 128 << 10},           // exactly at the cap
		{24<<20 - 4, 4096, 6<<20 - 1, 128 << 10},       // just under it
		{512 << 10, 4096, 128 << 10, 128 << 10},        // exactly at the floor
		{512<<10 + 4, 4096, 128<<10 + 1, 128 << 10},    // just over it
		{math.MaxUint64 - 1, 4096, 6 << 20, 128 << 10}, // no overflow
	} {
		got := execLimitsFor(c.stack, c.page)
		if got.Total != c.total || got.String != c.sz {
			t.Errorf("stack %d, page %d: %+v, want total %d, string %d", c.stack, c.page, got, c.total, c.sz)
		}
	}
}

// sizedSpec is a spec of program and args whose strings and pointers take
// exactly n bytes as checkExecSize counts them (env as given, counted
// too), the last argument padding to n.
func sizedSpec(t *testing.T, n uint64, env []driverapi.EnvVar, lead ...string) driverapi.RunSpec {
	t.Helper()
	spec := driverapi.RunSpec{Program: "/bin/sh", Args: lead, Env: env}
	cost := func(s string) uint64 { return uint64(len(s)) + 1 + execPointerSize }
	used := cost(spec.Program)
	for _, a := range lead {
		used += cost(a)
	}
	for _, e := range env {
		used += cost(e.Name + "=" + e.Value)
	}
	chunk := strings.Repeat("x", 999)
	for used+2*cost(chunk) <= n {
		spec.Args = append(spec.Args, chunk)
		used += cost(chunk)
	}
	if n < used+cost("") {
		t.Fatalf("cannot pad %d bytes to %d", used, n)
	}
	spec.Args = append(spec.Args, strings.Repeat("y", int(n-used-cost(""))))
	return spec
}

// TestCheckExecSize: what the kernel would take passes, to the byte; one
// byte more is refused with the field to change and the sizes, and so is
// a single string past MAX_ARG_STRLEN.
func TestCheckExecSize(t *testing.T) {
	lim := execLimitSet{Total: 2 << 20, String: 128 << 10}
	allowed := lim.Total - execHeadroom
	env := []driverapi.EnvVar{{Name: "PATH", Value: "/usr/bin:/bin"}}
	bigEnv := func(total int) []driverapi.EnvVar {
		var out []driverapi.EnvVar
		for i := 0; total > 0; i++ {
			v := strings.Repeat("v", min(total, 100<<10))
			out = append(out, driverapi.EnvVar{Name: "V" + strings.Repeat("a", i), Value: v})
			total -= len(v)
		}
		return out
	}
	at := sizedSpec(t, allowed, env, "-c", "echo $#")
	if err := checkExecSize(at, lim); err != nil {
		t.Fatalf("the largest command that fits: %v", err)
	}
	for _, c := range []struct {
		name, field, says string
		spec              driverapi.RunSpec
	}{
		{"one byte over", "args", fmt.Sprintf("more than the %d bytes", allowed), sizedSpec(t, allowed+1, env, "-c", "echo $#")},
		{"environment alone too large", "env", "environment (2", driverapi.RunSpec{Program: "/bin/true", Env: bigEnv(2 << 20)}},
		{"arguments over a large environment", "args", "arguments", sizedSpec(t, allowed+1, bigEnv(1<<20))},
		{"argument past MAX_ARG_STRLEN", "args", "argument 2 is 131072 bytes", driverapi.RunSpec{Program: "/bin/echo", Args: []string{"a", strings.Repeat("a", 128<<10)}}},
		{"variable past MAX_ARG_STRLEN", "env", "BIG is 131072 bytes", driverapi.RunSpec{Program: "/bin/true", Env: []driverapi.EnvVar{{Name: "BIG", Value: strings.Repeat("b", 128<<10-4)}}}},
		{"program past MAX_ARG_STRLEN", "program", "131072 bytes", driverapi.RunSpec{Program: "/" + strings.Repeat("p", 128<<10-1)}},
		{"no room at all", "env", "are more than the 0 bytes", driverapi.RunSpec{Program: "/bin/true"}},
	} {
		l := lim
		if c.name == "no room at all" {
			l.Total = execHeadroom - 1
		}
		err := checkExecSize(c.spec, l)
		var ise *driverapi.InvalidSpecError
		if !errors.As(err, &ise) || ise.Field != c.field || !strings.Contains(ise.Reason, c.says) {
			t.Errorf("%s: %v, want field %s saying %q", c.name, err, c.field, c.says)
		}
	}
	// The largest single string passes.
	if err := checkExecSize(driverapi.RunSpec{Program: "/bin/echo", Args: []string{strings.Repeat("a", 128<<10-1)}}, lim); err != nil {
		t.Errorf("an argument of MAX_ARG_STRLEN-1 bytes: %v", err)
	}
}
