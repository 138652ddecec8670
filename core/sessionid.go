package core

// ValidateSessionID refuses a session id the pipeline would refuse (empty,
// longer than 1024 bytes, not UTF-8, holding a NUL) with the same
// *InvalidCommandError (field session_id), so a front end can refuse it
// before it keeps anything about the session.
func ValidateSessionID(id string) error {
	return validateSessionID(id)
}
