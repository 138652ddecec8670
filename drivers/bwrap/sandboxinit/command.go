package sandboxinit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"
)

// The command record: what InitSpec.CommandFD holds, the target's argv and
// environment. They travel on a descriptor, not on bwrap's command line:
// bwrap refuses more than 9000 arguments of its own, the kernel caps every
// exec's argv and environment (bwrap's and sandbox-init's as much as the
// target's), and the environment must reach no process but the target (see
// InitSpec.CommandFD). On a descriptor they cost bwrap and sandbox-init
// nothing, and the target's exec is the only one that carries them.
//
// Layout, integers little-endian: the magic CommandMagic (8 bytes), the
// version (uint32, CommandVersion), argc and envc (uint32 each), then argc
// NUL-terminated arguments and envc NUL-terminated NAME=VALUE entries, and
// nothing after them. Arguments are bytes: any but NUL, empty ones included.
// A record that is not exactly that is refused, and sandbox-init runs
// nothing: an argument taken from a damaged record would run another
// command than the one the launcher was asked for.
const (
	CommandMagic   = "ALEPHCMD"
	CommandVersion = 1
	// commandHeaderLen is the magic, the version, argc and envc.
	commandHeaderLen = len(CommandMagic) + 3*4
	// maxCommandBytes bounds a record (the kernel takes at most 6 MiB of
	// argv and environment at an exec, and the launcher checks the
	// command against its limit before it writes the record).
	maxCommandBytes = 32 << 20
)

// EncodeCommand renders argv and env (NAME=VALUE entries) as a command
// record. It refuses what DecodeCommand would refuse.
func EncodeCommand(argv, env []string) ([]byte, error) {
	if err := checkCommand(argv, env); err != nil {
		return nil, err
	}
	n := commandHeaderLen
	for _, ss := range [][]string{argv, env} {
		for _, s := range ss {
			n += len(s) + 1
		}
	}
	if n > maxCommandBytes {
		return nil, &InitSpecError{"command_fd", fmt.Sprintf("a command record of %d bytes (at most %d)", n, maxCommandBytes)}
	}
	b := make([]byte, 0, n)
	b = append(b, CommandMagic...)
	b = binary.LittleEndian.AppendUint32(b, CommandVersion)
	b = binary.LittleEndian.AppendUint32(b, uint32(len(argv)))
	b = binary.LittleEndian.AppendUint32(b, uint32(len(env)))
	for _, ss := range [][]string{argv, env} {
		for _, s := range ss {
			b = append(b, s...)
			b = append(b, 0)
		}
	}
	return b, nil
}

// DecodeCommand is the inverse of EncodeCommand. It fails closed: a wrong
// magic or version, counts the data does not hold, an entry without its
// NUL, bytes after the last entry, an empty program or an environment
// entry that is not NAME=VALUE are all errors.
func DecodeCommand(data []byte) (argv, env []string, err error) {
	bad := func(reason string) ([]string, []string, error) {
		return nil, nil, &InitSpecError{"command_fd", reason}
	}
	if len(data) > maxCommandBytes {
		return bad(fmt.Sprintf("a command record of more than %d bytes", maxCommandBytes))
	}
	if len(data) < commandHeaderLen || string(data[:len(CommandMagic)]) != CommandMagic {
		return bad("not a command record (no " + CommandMagic + " header)")
	}
	h := data[len(CommandMagic):]
	if v := binary.LittleEndian.Uint32(h); v != CommandVersion {
		return bad(fmt.Sprintf("command record version %d, this sandbox-init reads version %d", v, CommandVersion))
	}
	argc, envc := uint64(binary.LittleEndian.Uint32(h[4:])), uint64(binary.LittleEndian.Uint32(h[8:]))
	body := data[commandHeaderLen:]
	// Every entry takes at least its NUL: counts beyond that are a
	// damaged record, refused before anything is allocated for them.
	if argc+envc > uint64(len(body)) {
		return bad(fmt.Sprintf("%d arguments and %d variables in %d bytes", argc, envc, len(body)))
	}
	next := func() (string, bool) {
		i := bytes.IndexByte(body, 0)
		if i < 0 {
			return "", false
		}
		s := string(body[:i])
		body = body[i+1:]
		return s, true
	}
	argv = make([]string, 0, argc)
	for range argc {
		s, ok := next()
		if !ok {
			return bad("an argument without its terminating NUL")
		}
		argv = append(argv, s)
	}
	env = make([]string, 0, envc)
	for range envc {
		s, ok := next()
		if !ok {
			return bad("an environment entry without its terminating NUL")
		}
		env = append(env, s)
	}
	if len(body) != 0 {
		return bad(fmt.Sprintf("%d bytes after the last entry", len(body)))
	}
	if err := checkCommand(argv, env); err != nil {
		return nil, nil, err
	}
	return argv, env, nil
}

// checkCommand is what a record's argv and env must be: a program, and
// nothing the kernel's NUL-terminated strings cannot carry.
func checkCommand(argv, env []string) error {
	if len(argv) == 0 || argv[0] == "" {
		return &InitSpecError{"command_fd", "empty program"}
	}
	for _, a := range argv {
		if strings.IndexByte(a, 0) >= 0 {
			return &InitSpecError{"command_fd", "argument contains NUL"}
		}
	}
	for _, kv := range env {
		if strings.IndexByte(kv, '=') <= 0 || strings.IndexByte(kv, 0) >= 0 {
			return &InitSpecError{"command_fd", fmt.Sprintf("environment entry %q is not NAME=VALUE", kv)}
		}
	}
	return nil
}
