package driverapi

// OneCommandEnv, set to "1" in a driver plugin's environment, tells the
// driver that its host runs one command with it and then ends it (the
// CLI's one-shot exec). A driver may then leave out what serves only a
// longer life: state shared between a session's commands (there is no
// second command to share it with), caches kept warm for later commands.
// It is a hint about cost only: what a command is allowed and denied is
// the same with or without it, and a driver that ignores it is correct. A
// host that runs more commands than it said gets them run all the same,
// each as the driver's capability report describes.
const OneCommandEnv = "ALEPH_DRIVER_ONE_COMMAND"
