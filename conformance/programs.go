package conformance

// Every program the cases run, in one place so a port to another OS changes
// only this table. The same paths exist on Linux (Debian and derivatives)
// and macOS. Scripts run by sh find the rest (cat, head, sleep, mkdir, ln,
// mv, tr) through progPath.
const (
	progSh   = "/bin/sh"       // POSIX shell
	progEnv  = "/usr/bin/env"  // prints its environment, one NAME=VALUE a line
	progCat  = "/bin/cat"      // copies stdin to stdout
	progPerl = "/usr/bin/perl" // sockets, threads, memory and setsid without extra tools
	progPath = "/usr/local/bin:/usr/bin:/bin"
)
