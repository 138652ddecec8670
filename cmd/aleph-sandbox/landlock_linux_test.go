package main

import llsys "github.com/landlock-lsm/go-landlock/landlock/syscall"

// hostLandlockABI is the Landlock ABI this kernel offers to this process, 0
// when it has none or it was made unavailable (scripts/test-nolandlock.sh
// refuses landlock_create_ruleset for the whole test run, the driver
// included). The driver enforces up to the same level: its own limit lies
// above every ABI the tests branch on.
func hostLandlockABI() int {
	v, err := llsys.LandlockGetABIVersion()
	if err != nil || v < 0 {
		return 0
	}
	return v
}
