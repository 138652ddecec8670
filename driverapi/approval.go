package driverapi

// ApprovalOutcome is a user's answer to an elevation request.
type ApprovalOutcome int

const (
	// ApprovalDenied: the user said no. The zero value, so a forgotten
	// answer denies.
	ApprovalDenied ApprovalOutcome = iota
	// ApprovalApproved: the user said yes.
	ApprovalApproved
	// ApprovalTimeout: nobody answered in time.
	ApprovalTimeout
	// ApprovalApprovedOnce: yes, for this command only. The pipeline
	// keeps an ApprovalApproved as a grant of the session (a later
	// command asking no more is not asked); this one it does not keep,
	// so an approver whose yes is its own (a front end's baseline, not
	// the session's) lends it to no later command.
	ApprovalApprovedOnce
)

func (o ApprovalOutcome) String() string {
	switch o {
	case ApprovalApproved:
		return "approved"
	case ApprovalDenied:
		return "denied"
	case ApprovalTimeout:
		return "timeout"
	case ApprovalApprovedOnce:
		return "approved once"
	}
	return "unknown"
}

// ApprovalRequest describes an elevation a command asks for: Requested is
// not within Baseline (nor within an earlier grant of the session).
type ApprovalRequest struct {
	SessionID string
	CommandID string
	Program   string
	Args      []string
	Requested Capabilities
	Baseline  Capabilities
	// Summary is one human sentence, e.g. "this command asks for network
	// access to all hosts".
	Summary string
}
