// Command aleph-driver-seatbelt is the macOS sandbox driver plugin: it
// serves drivers/seatbelt over the go-plugin protocol. Started with the
// shim argument, it is the tiny RLIMIT_AS launcher the driver uses for
// memory limits. On any other OS it refuses to start.
package main
