package appcontainer

import (
	"encoding/binary"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Access rights (winnt.h), spelled out so the plan is testable anywhere.
const (
	fileReadData        = 0x0001 // FILE_LIST_DIRECTORY on directories
	fileWriteData       = 0x0002 // FILE_ADD_FILE
	fileAppendData      = 0x0004 // FILE_ADD_SUBDIRECTORY
	fileWriteEA         = 0x0010
	fileDeleteChild     = 0x0040
	fileWriteAttributes = 0x0100
	accessDelete        = 0x00010000
	accessWriteDAC      = 0x00040000
	accessWriteOwner    = 0x00080000

	FileGenericRead    = 0x00120089
	FileGenericWrite   = 0x00120116
	FileGenericExecute = 0x001200A0
)

// Masks used by the plan.
const (
	// MaskWorkspace lets the sandbox read, write, run and delete what is
	// in the workspace, but not FILE_DELETE_CHILD: with that right on the
	// workspace it could delete or rename .git through the parent, even
	// with .git itself denied.
	MaskWorkspace = FileGenericRead | FileGenericWrite | FileGenericExecute | accessDelete
	// MaskWriteGrant is read/write below an fs_write grant: the same as
	// the workspace's, for the same reason (a grant holds protected
	// entries too).
	MaskWriteGrant = MaskWorkspace
	// MaskReadGrant is read and execute.
	MaskReadGrant = FileGenericRead | FileGenericExecute
	// MaskDenyProtected denies every way to change a protected directory
	// or anything below it. Not FILE_GENERIC_WRITE: that includes
	// SYNCHRONIZE and READ_CONTROL, and denying those would break reads.
	MaskDenyProtected = fileWriteData | fileAppendData | fileWriteEA | fileWriteAttributes |
		fileDeleteChild | accessDelete | accessWriteDAC | accessWriteOwner
	// MaskDenyRoot is denied on the workspace and on each fs_write grant,
	// not inherited: no entry can be removed or renamed through the root's
	// FILE_DELETE_CHILD, and the root itself cannot be removed or renamed
	// (DELETE).
	MaskDenyRoot = fileDeleteChild | accessDelete
)

// Trustee is whom an ACE names.
type Trustee int

const (
	// TrusteeAppContainer is this command's own AppContainer SID.
	TrusteeAppContainer Trustee = iota + 1
	// TrusteeCapability is the per-command capability SID that is a
	// restricting SID of the restricted tier's token (see
	// RestrictingSIDs): with WRITE_RESTRICTED, a write needs an ACE for
	// it, and a DENY for it binds this command and nobody else.
	TrusteeCapability
)

// SIDRestrictedCode is RESTRICTED (S-1-5-12), which this driver no longer
// uses as a restricting SID: it is in every restricted token, so ACEs for
// it could not tell commands apart.
const SIDRestrictedCode = "S-1-5-12"

// SIDEveryone is the Everyone (World) well-known SID.
const SIDEveryone = "S-1-1-0"

// CreateRestrictedToken flags (winnt.h).
const (
	disableMaxPrivilege = 0x1
	writeRestricted     = 0x8
)

// RestrictedTokenFlags are the restricted tier's CreateRestrictedToken
// flags: every privilege but SeChangeNotify removed, and WRITE_RESTRICTED,
// so the restricting SIDs are checked for write access only: reads go on
// as the user, writes need the restricting SIDs' access too.
const RestrictedTokenFlags = disableMaxPrivilege | writeRestricted

// RestrictingSIDs are the restricted tier's restricting SIDs: the
// command's own capability SID (its ACEs grant the workspace and fs_write
// grants and deny the protected directories), the logon SID (the window
// station and desktop are granted to it) and Everyone (system objects a
// process must write, such as the NUL device, grant it). Never the user's
// SID, nor Users or Authenticated Users: those would let the second access
// check pass wherever the user may write, leaving the Low label as the
// only barrier.
func RestrictingSIDs(capabilitySID, logonSID string) []string {
	out := []string{capabilitySID}
	if logonSID != "" {
		out = append(out, logonSID)
	}
	return append(out, SIDEveryone)
}

// NewCapabilitySID makes a fresh SID for one restricted-tier command from
// 16 random bytes, in the capability-SID authority (S-1-15-3-1024-...),
// which no account or group uses.
func NewCapabilitySID(random io.Reader) (string, error) {
	var b [16]byte
	if _, err := io.ReadFull(random, b[:]); err != nil {
		return "", fmt.Errorf("capability SID: %w", err)
	}
	sid := "S-1-15-3-1024"
	for i := 0; i < 16; i += 4 {
		sid += "-" + strconv.FormatUint(uint64(binary.LittleEndian.Uint32(b[i:])), 10)
	}
	return sid, nil
}

// ACE is one access-control change.
type ACE struct {
	Path    string
	Trustee Trustee
	Deny    bool
	Mask    uint32
	Inherit bool // to sub-directories and files
	// BestEffort: a failure to apply is ignored (the program file may be
	// in a system directory the user cannot re-ACL, where all application
	// packages can read it anyway).
	BestEffort bool
	// Revoke: remove this trustee's entries after the command.
	Revoke bool
}

// Label is a mandatory integrity label change.
type Label struct {
	Path    string
	Low     bool // Low, else Medium
	Protect bool // do not inherit the parent's label
	// Revert: remove the explicit label after the command (fs_write
	// grants, which belong to the user; the workspace keeps Low).
	Revert bool
}

// Setup is everything to do to the file system before a tier runs. The
// missing protected entries are not in it: the driver has made them
// exist as placeholders before planning (placeholder.go).
type Setup struct {
	ACEs   []ACE
	Labels []Label
}

// rootedProtected are the protected entries of the workspace and of the
// fs_write grants that exist: a missing grant has nothing to hold them
// (and the command cannot create it outside its writable trees). Each
// must exist while the command runs, as itself or as a placeholder.
func (p Plan) rootedProtected(exists func(string) bool) []string {
	var prots []string
	for _, prot := range p.Protected {
		if root := winParent(prot); strings.EqualFold(root, p.Workspace) || exists(root) {
			prots = append(prots, prot)
		}
	}
	return prots
}

// PlanSetup computes the file-system changes for tier. exists reports
// whether a path exists now; program is the resolved program.
func PlanSetup(tier Tier, p Plan, program string, exists func(string) bool) Setup {
	var s Setup
	if tier == TierJobObject {
		return s // the host's own token: ACLs could not restrict it
	}
	prots := p.rootedProtected(exists)
	// A grant on or below a protected directory would be an explicit
	// allow, which Windows orders before the inherited DENY: drop it.
	// A grant that does not exist has nothing to carry an ACE (and the
	// command cannot create it outside its writable trees); skipping it
	// keeps a typo from failing the command.
	writes := existing(p.outsideProtected(p.Write), exists)
	reads := existing(p.outsideProtected(p.Read), exists)
	switch tier {
	case TierAppContainer:
		ac := func(path string, mask uint32, deny, inherit bool) ACE {
			return ACE{Path: path, Trustee: TrusteeAppContainer, Mask: mask, Deny: deny, Inherit: inherit, Revoke: true}
		}
		// Grants first, then denies: a later GRANT_ACCESS merge must not
		// be able to drop a DENY.
		s.ACEs = append(s.ACEs, ac(p.Workspace, MaskWorkspace, false, true))
		for _, w := range writes {
			s.ACEs = append(s.ACEs, ac(w, MaskWriteGrant, false, true))
		}
		for _, r := range reads {
			s.ACEs = append(s.ACEs, ac(r, MaskReadGrant, false, true))
		}
		if program != "" && !p.covers(program) {
			a := ac(program, MaskReadGrant, false, false)
			a.BestEffort = true
			s.ACEs = append(s.ACEs, a)
		}
		s.ACEs = append(s.ACEs, ac(p.Workspace, MaskDenyRoot, true, false))
		for _, w := range writes {
			s.ACEs = append(s.ACEs, ac(w, MaskDenyRoot, true, false))
		}
		for _, prot := range prots {
			s.ACEs = append(s.ACEs, ac(prot, MaskDenyProtected, true, true))
		}
	case TierRestrictedToken:
		// Two barriers: the capability SID's ACEs (WRITE_RESTRICTED makes
		// every write need one), and Low integrity (writable only where
		// labelled Low).
		cp := func(path string, mask uint32, deny, inherit bool) ACE {
			return ACE{Path: path, Trustee: TrusteeCapability, Mask: mask, Deny: deny, Inherit: inherit, Revoke: true}
		}
		s.ACEs = append(s.ACEs, cp(p.Workspace, MaskWorkspace, false, true))
		for _, w := range writes {
			s.ACEs = append(s.ACEs, cp(w, MaskWriteGrant, false, true))
		}
		s.ACEs = append(s.ACEs, cp(p.Workspace, MaskDenyRoot, true, false))
		for _, w := range writes {
			s.ACEs = append(s.ACEs, cp(w, MaskDenyRoot, true, false))
		}
		for _, prot := range prots {
			s.ACEs = append(s.ACEs, cp(prot, MaskDenyProtected, true, true))
		}
		s.Labels = append(s.Labels, Label{Path: p.Workspace, Low: true})
		for _, w := range writes {
			s.Labels = append(s.Labels, Label{Path: w, Low: true, Revert: true})
		}
		// After the workspace, so its inherited Low label stops here.
		for _, prot := range prots {
			s.Labels = append(s.Labels, Label{Path: prot, Low: false, Protect: true})
		}
	}
	return s
}

// winParent is the directory holding p (p itself for a volume root).
func winParent(p string) string {
	c := winComponents(p)
	if len(c) < 2 {
		vol, _, _ := winVolume(WinClean(p))
		return vol + `\`
	}
	return c[len(c)-2]
}

// outsideProtected keeps the paths that are not a protected directory or
// below one.
func (p Plan) outsideProtected(paths []string) []string {
	var out []string
	for _, x := range paths {
		inside := false
		for _, prot := range p.Protected {
			if WinWithin(x, prot) {
				inside = true
			}
		}
		if !inside {
			out = append(out, x)
		}
	}
	return out
}

func existing(paths []string, exists func(string) bool) []string {
	var out []string
	for _, x := range paths {
		if exists(x) {
			out = append(out, x)
		}
	}
	return out
}

// covers reports whether path is already granted by the plan.
func (p Plan) covers(path string) bool {
	for _, r := range append(append([]string{p.Workspace}, p.Read...), p.Write...) {
		if WinWithin(path, r) {
			return true
		}
	}
	return false
}
