package main

import (
	"flag"
	"io"
	"sync"
)

// `exec -i` and `exec -t` (CLI.md, second round): stdin streamed to the
// command as it arrives, and a pseudo-terminal that the driver allocates
// inside the sandbox, wired to the user's terminal.

// interactiveFlags are -i/--interactive and -t/--tty.
type interactiveFlags struct {
	interactive, tty bool
}

func (f *interactiveFlags) register(fs *flag.FlagSet) {
	const iUsage = "stream standard input to the command as it arrives (closing it ends the command's stdin)"
	const tUsage = "give the command a pseudo-terminal, allocated inside the sandbox, whose window size follows the user's terminal; with -i too, the user's terminal is put in raw mode"
	fs.BoolVar(&f.interactive, "i", false, iUsage)
	fs.BoolVar(&f.interactive, "interactive", false, iUsage)
	fs.BoolVar(&f.tty, "t", false, tUsage)
	fs.BoolVar(&f.tty, "tty", false, tUsage)
}

func (f *interactiveFlags) any() bool { return f.interactive || f.tty }

// check refuses combinations that cannot mean anything.
func (f *interactiveFlags) check(rf *runFlags) string {
	switch {
	case !f.any():
		return ""
	case rf.stdin:
		return "exec: --stdin gives the command its stdin as one buffer, up front; -i/-t stream it: use one or the other"
	case f.tty && rf.json:
		return "exec: -t/--tty writes the terminal's output as it comes; --json prints one object at the end: use one or the other"
	}
	return ""
}

// onFirstRead calls first once, before the first Read of r: the terminal
// goes raw only when the command's run reads its input, after any
// approval prompt has been answered in cooked mode.
type onFirstRead struct {
	r     io.Reader
	once  sync.Once
	first func()
}

func (o *onFirstRead) Read(p []byte) (int, error) {
	o.once.Do(o.first)
	return o.r.Read(p)
}
