//go:build linux

package sandboxinit

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// programsFile is a memfd holding data, sealed when seal is set.
func programsFile(t *testing.T, data []byte, seal bool) *os.File {
	t.Helper()
	fd, err := unix.MemfdCreate("test-seccomp", unix.MFD_ALLOW_SEALING)
	if err != nil {
		t.Fatal(err)
	}
	f := os.NewFile(uintptr(fd), "test-seccomp")
	t.Cleanup(func() { f.Close() })
	if _, err := f.Write(data); err != nil {
		t.Fatal(err)
	}
	if seal {
		if _, err := unix.FcntlInt(f.Fd(), unix.F_ADD_SEALS, unix.F_SEAL_SEAL|unix.F_SEAL_WRITE|unix.F_SEAL_GROW|unix.F_SEAL_SHRINK); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func assembled(t *testing.T, prog []bpf.Instruction) []bpf.RawInstruction {
	t.Helper()
	raw, err := bpf.Assemble(prog)
	if err != nil {
		t.Fatal(err)
	}
	return raw
}

// The precompiled programs are exactly what sandbox-init would build, for
// the target and for the supervisor, in every mode.
func TestPrecompiledProgramsMatchBuilt(t *testing.T) {
	for _, mode := range []SocketMode{SocketUnrestricted, SocketUnixOnly, SocketProxyRouted} {
		for _, spawn := range []bool{false, true} {
			s := InitSpec{SocketMode: mode, AllowSpawn: spawn}
			if mode == SocketProxyRouted {
				s.BridgePorts = []uint16{3128, 1080}
			}
			data, err := PrecompiledPrograms(s)
			if err != nil {
				t.Fatal(err)
			}
			f := programsFile(t, data, true)
			target, supervisor, err := readPrograms(int(f.Fd()))
			if err != nil {
				t.Fatal(err)
			}
			wantT, _ := guardedProgram(&s)
			sup := supervisorSpec(&s)
			wantS, _ := guardedProgram(&sup)
			if !reflect.DeepEqual(assembled(t, target), assembled(t, wantT)) || !reflect.DeepEqual(assembled(t, supervisor), assembled(t, wantS)) {
				t.Errorf("%s spawn=%v: precompiled programs differ from the built ones", mode, spawn)
			}
			if !spawn && reflect.DeepEqual(assembled(t, target), assembled(t, supervisor)) {
				t.Errorf("%s: the no-spawn target program equals the supervisor's", mode)
			}
			// initProgram picks the right one.
			s.SeccompFD = int(f.Fd())
			got, err := initProgram(&s)
			if err != nil || !reflect.DeepEqual(assembled(t, got), assembled(t, wantT)) {
				t.Errorf("%s spawn=%v: initProgram (plain) is not the target's: %v", mode, spawn, err)
			}
			s.Supervise = true
			if got, err = initProgram(&s); err != nil || !reflect.DeepEqual(assembled(t, got), assembled(t, wantS)) {
				t.Errorf("%s spawn=%v: initProgram (supervising) is not the supervisor's: %v", mode, spawn, err)
			}
		}
	}
}

// The launcher shares one memfd among specs with the same PrecompileKey:
// every other field of InitSpec must leave the programs unchanged. A field
// added later that changes them fails here until the key covers it.
func TestPrecompileKeyCoversTheProgram(t *testing.T) {
	base := InitSpec{SocketMode: SocketUnixOnly}
	want, err := PrecompiledPrograms(base)
	if err != nil {
		t.Fatal(err)
	}
	// NotifyFD is in the key by its presence (SpawnNotified), checked below.
	// childNotifies is never sent: supervisorSpec derives it from the rest.
	key := map[string]bool{"SocketMode": true, "AllowSpawn": true, "NoNamespaces": true, "BridgePorts": true, "NotifyFD": true,
		"childNotifies": true}
	rt := reflect.TypeOf(base)
	for i := range rt.NumField() {
		f := rt.Field(i)
		if key[f.Name] {
			continue
		}
		s := base
		v := reflect.ValueOf(&s).Elem().Field(i)
		switch v.Kind() {
		case reflect.Bool:
			v.SetBool(true)
		case reflect.Int, reflect.Uint64:
			if v.Kind() == reflect.Int {
				v.SetInt(7)
			} else {
				v.SetUint(7)
			}
		case reflect.Slice:
			if f.Type.Elem().Kind() == reflect.String {
				v.Set(reflect.ValueOf([]string{"/x"}))
			} else {
				v.Set(reflect.ValueOf([]int{9}))
			}
		case reflect.Ptr:
			v.Set(reflect.New(f.Type.Elem()))
		default:
			t.Fatalf("field %s of kind %s: teach this test about it", f.Name, v.Kind())
		}
		got, err := PrecompiledPrograms(s)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != string(want) {
			t.Errorf("field %s changes the programs but is not in PrecompileKey", f.Name)
		}
		if KeyOf(s) != KeyOf(base) {
			t.Errorf("field %s changes the key", f.Name)
		}
	}
	// A notify socket's presence changes both, its number neither.
	n5, n6 := base, base
	n5.NotifyFD, n6.NotifyFD = 5, 6
	p5, _ := PrecompiledPrograms(n5)
	p6, _ := PrecompiledPrograms(n6)
	if string(p5) == string(want) || KeyOf(n5) == KeyOf(base) {
		t.Error("a notify socket leaves the programs or the key unchanged")
	}
	if string(p5) != string(p6) || KeyOf(n5) != KeyOf(n6) {
		t.Error("the notify socket's number changes the programs or the key")
	}
	// Positive control: a key field does change them.
	s := base
	s.AllowSpawn = true
	if got, _ := PrecompiledPrograms(s); string(got) == string(want) {
		t.Error("AllowSpawn does not change the programs: the comparison proves nothing")
	}
}

// A memfd that is not sealed, or holds anything but a program set, is
// refused; the sealed original is accepted (positive control).
func TestReadProgramsRefuses(t *testing.T) {
	data, err := PrecompiledPrograms(InitSpec{SocketMode: SocketUnixOnly})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := readPrograms(int(programsFile(t, data, true).Fd())); err != nil {
		t.Fatalf("control: %v", err)
	}
	for name, c := range map[string]struct {
		data []byte
		seal bool
		want string
	}{
		"unsealed":  {data, false, "not sealed"},
		"magic":     {append([]byte("X"), data[1:]...), true, "not a program set"},
		"truncated": {data[:len(data)-3], true, "program of"},
		"trailing":  {append(append([]byte(nil), data...), 0), true, "trailing"},
		"empty":     {[]byte(programsMagic + "\x00\x00\x00\x00"), true, "program of 0"},
	} {
		_, _, err := readPrograms(int(programsFile(t, c.data, c.seal).Fd()))
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", name, err, c.want)
		}
	}
}

// Through the real sandbox-init: the programs on the descriptor are the
// ones loaded, not ones it builds. The spec allows spawning, the programs
// given are a no-spawn spec's: fork fails (it succeeds with the spec's own
// programs, positive control). An unsealed memfd stops sandbox-init before
// the target runs.
func TestSandboxInitLoadsPrecompiled(t *testing.T) {
	requireSeccomp(t)
	spec := baseSpec(t, SocketUnixOnly)
	noSpawn := spec
	noSpawn.AllowSpawn = false
	given, err := PrecompiledPrograms(noSpawn)
	if err != nil {
		t.Fatal(err)
	}
	own, err := PrecompiledPrograms(spec)
	if err != nil {
		t.Fatal(err)
	}
	exe := testExe(t)
	spec.SeccompFD = 3
	args, err := InitArgs(spec, exe, "probe", "fork")
	if err != nil {
		t.Fatal(err)
	}
	argv := append([]string{exe, SandboxInitCommand}, args...)
	if got := run(t, argv, programsFile(t, own, true)).result(t); got != "ok" {
		t.Fatalf("control: fork under the spec's own programs: %s", got)
	}
	if got := run(t, argv, programsFile(t, given, true)).result(t); got != "EPERM" {
		t.Fatalf("fork under the given no-spawn programs: %s, want EPERM", got)
	}
	r := run(t, argv, programsFile(t, own, false))
	if r.exit != SandboxInitExitCode || !strings.Contains(r.stderr, "not sealed") || strings.Contains(r.stdout, "RESULT") {
		t.Fatalf("unsealed programs: exit %d stdout %q stderr %q", r.exit, r.stdout, r.stderr)
	}
}
