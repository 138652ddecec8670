package driverapi

const (
	ExitDetailSessionSandbox = "session_sandbox"
	SessionSandboxNew        = "new"
	SessionSandboxReused     = "reused"
	SessionSandboxRebuilt    = "rebuilt"
)
