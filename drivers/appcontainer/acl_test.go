package appcontainer

import (
	"strings"
	"testing"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

func TestMasks(t *testing.T) {
	if MaskWorkspace&fileDeleteChild != 0 {
		t.Error("workspace grant includes FILE_DELETE_CHILD: .git could be renamed through the parent")
	}
	if MaskDenyProtected&FileGenericRead != 0 {
		t.Errorf("protected DENY mask %#x overlaps reading (%#x): reads would break", MaskDenyProtected, MaskDenyProtected&FileGenericRead)
	}
	for _, right := range []uint32{fileWriteData, fileAppendData, fileDeleteChild, accessDelete, accessWriteDAC, accessWriteOwner, fileWriteAttributes} {
		if MaskDenyProtected&right == 0 {
			t.Errorf("protected DENY mask misses %#x", right)
		}
	}
	if MaskReadGrant&(fileWriteData|fileAppendData|accessDelete) != 0 {
		t.Error("read grant allows writing")
	}
	if MaskWriteGrant&fileWriteData == 0 || MaskWorkspace&fileWriteData == 0 || MaskWriteGrant&accessDelete == 0 {
		t.Error("positive control: grants must allow writing and deleting their own files")
	}
	// FILE_DELETE_CHILD on a root would remove or rename a protected
	// entry in it whatever that entry's own DENY says.
	if MaskWriteGrant&fileDeleteChild != 0 || MaskWorkspace&fileDeleteChild != 0 {
		t.Error("a writable root grants FILE_DELETE_CHILD")
	}
	if MaskDenyRoot != fileDeleteChild|accessDelete {
		t.Errorf("root deny %#x", MaskDenyRoot)
	}
}

func existsIn(paths ...string) func(string) bool {
	return func(p string) bool {
		for _, x := range paths {
			if strings.EqualFold(x, p) {
				return true
			}
		}
		return false
	}
}

func TestPlanSetupAppContainer(t *testing.T) {
	p := mustBuild(t, winReq(driverapi.Capabilities{FSRead: []string{`D:\ref`}, FSWrite: []string{`D:\out`, wsPath + `\.git\hooks`}}), MapFS{})
	s := PlanSetup(TierAppContainer, p, `C:\Users\dev\bin\tool.exe`, existsIn(wsPath+`\.git`, `D:\ref`, `D:\out`, wsPath+`\.git\hooks`, `D:\out\.vscode`))
	// The default set in the workspace and in the existing fs_write grant
	// D:\out must exist while the command runs (as itself or as a
	// placeholder); none inside .git\hooks (a grant inside a protected
	// entry is dropped, not a root of its own).
	var wantRooted []string
	for _, root := range []string{wsPath, `D:\out`} {
		for _, e := range driverapi.DefaultProtectedEntries() {
			wantRooted = append(wantRooted, root+`\`+e)
		}
	}
	exists := existsIn(wsPath+`\.git`, `D:\ref`, `D:\out`, wsPath+`\.git\hooks`, `D:\out\.vscode`)
	if got := p.rootedProtected(exists); strings.Join(got, "|") != strings.Join(wantRooted, "|") {
		t.Errorf("rooted protected %q\nwant  %q", got, wantRooted)
	}
	find := func(path string, deny bool) *ACE {
		for i, a := range s.ACEs {
			if a.Path == path && a.Deny == deny {
				return &s.ACEs[i]
			}
		}
		return nil
	}
	if a := find(wsPath, false); a == nil || a.Mask != MaskWorkspace || !a.Inherit || a.Trustee != TrusteeAppContainer || !a.Revoke {
		t.Errorf("workspace grant %+v", a)
	}
	if a := find(wsPath, true); a == nil || a.Mask != MaskDenyRoot || a.Inherit {
		t.Errorf("workspace delete-child deny %+v", a)
	}
	if a := find(`D:\out`, true); a == nil || a.Mask != MaskDenyRoot || a.Inherit {
		t.Errorf("write grant delete-child deny %+v", a)
	}
	if len(p.Protected) != 2*len(driverapi.DefaultProtectedEntries()) {
		t.Errorf("protected %q: want the default set in the workspace and in D:\\out", p.Protected)
	}
	for _, prot := range p.Protected {
		if a := find(prot, true); a == nil || a.Mask != MaskDenyProtected || !a.Inherit {
			t.Errorf("protected deny on %s: %+v", prot, a)
		}
	}
	for _, a := range s.ACEs {
		if WinWithin(a.Path, wsPath+`\.git\hooks`) && a.Path != wsPath+`\.git` {
			t.Errorf("an ACE inside .git\\hooks: %+v", a)
		}
	}
	if a := find(`D:\out`, false); a == nil || a.Mask != MaskWriteGrant {
		t.Errorf("write grant %+v", a)
	}
	if a := find(`D:\ref`, false); a == nil || a.Mask != MaskReadGrant {
		t.Errorf("read grant %+v", a)
	}
	if a := find(`C:\Users\dev\bin\tool.exe`, false); a == nil || !a.BestEffort || a.Inherit {
		t.Errorf("program grant %+v", a)
	}
	if a := find(wsPath+`\.git\hooks`, false); a != nil {
		t.Error("an fs_write grant inside .git was planned: its explicit allow would beat the inherited DENY")
	}
	// Every DENY comes after every grant.
	seenDeny := false
	for _, a := range s.ACEs {
		if a.Deny {
			seenDeny = true
		} else if seenDeny {
			t.Errorf("grant on %s after a deny", a.Path)
		}
	}
	// A program already inside a grant needs no ACE of its own.
	s = PlanSetup(TierAppContainer, p, `D:\ref\tool.exe`, existsIn())
	for _, a := range s.ACEs {
		if a.Path == `D:\ref\tool.exe` {
			t.Error("redundant program ACE")
		}
	}
	// Nothing exists but the workspace: its whole set needs placeholders,
	// and the missing grant D:\out gets neither placeholders nor ACEs.
	if got := p.rootedProtected(existsIn()); len(got) != len(driverapi.DefaultProtectedEntries()) || !WinWithin(got[0], wsPath) {
		t.Errorf("all protected entries missing: rooted %q", got)
	}
	for _, a := range s.ACEs {
		if WinWithin(a.Path, `D:\out`) {
			t.Errorf("ACE for the missing grant: %+v", a)
		}
	}
}

func TestPlanSetupRestrictedAndJob(t *testing.T) {
	p := mustBuild(t, winReq(driverapi.Capabilities{FSWrite: []string{`D:\out`}}), MapFS{})
	s := PlanSetup(TierRestrictedToken, p, `C:\Windows\System32\cmd.exe`, existsIn(`D:\out`))
	n := len(driverapi.DefaultProtectedEntries())
	if len(s.Labels) != 2+2*n || s.Labels[0].Path != wsPath || !s.Labels[0].Low || s.Labels[0].Revert {
		t.Fatalf("labels %+v", s.Labels)
	}
	if l := s.Labels[1]; l.Path != `D:\out` || !l.Low || !l.Revert {
		t.Errorf("write grant label %+v", l)
	}
	for _, l := range s.Labels[2:] {
		if l.Low || !l.Protect {
			t.Errorf("protected label %+v must be Medium and not inherit", l)
		}
	}
	// The capability SID is granted the workspace and the existing write
	// grant, denied delete-child on the workspace and every write on the
	// protected directories, all revoked afterwards; grants before denies.
	var grants, denies []string
	for _, a := range s.ACEs {
		if a.Trustee != TrusteeCapability || !a.Revoke {
			t.Errorf("restricted-tier ACE %+v: want the command's capability SID, revoked", a)
		}
		if a.Deny {
			denies = append(denies, a.Path)
		} else {
			if len(denies) > 0 {
				t.Errorf("grant on %s after a deny", a.Path)
			}
			grants = append(grants, a.Path)
		}
	}
	// Denied: both roots (delete-child, delete), and the default set in
	// each.
	if strings.Join(grants, "|") != wsPath+`|D:\out` || len(denies) != 2+2*n || denies[0] != wsPath || denies[1] != `D:\out` {
		t.Errorf("grants %q denies %q", grants, denies)
	}
	// A grant that does not exist is skipped, not a setup failure.
	if m := PlanSetup(TierRestrictedToken, p, `C:\x.exe`, existsIn()); len(m.Labels) != 1+n {
		t.Errorf("missing fs_write grant still labelled: %+v", m.Labels)
	}
	if j := PlanSetup(TierJobObject, p, `C:\x.exe`, existsIn()); len(j.ACEs)+len(j.Labels) != 0 {
		t.Errorf("job tier changes the file system: %+v", j)
	}
}

func TestRestrictedTokenShape(t *testing.T) {
	if RestrictedTokenFlags&0x8 == 0 {
		t.Error("WRITE_RESTRICTED not set: the restricting SIDs would bind reads too, or the Low label would be the only write barrier")
	}
	if RestrictedTokenFlags&0x1 == 0 {
		t.Error("DISABLE_MAX_PRIVILEGE not set")
	}
	user := "S-1-5-21-1-2-3-1001"
	got := RestrictingSIDs("S-1-15-3-1024-1-2-3-4", "S-1-5-5-0-12345")
	if strings.Join(got, ",") != "S-1-15-3-1024-1-2-3-4,S-1-5-5-0-12345,"+SIDEveryone {
		t.Errorf("restricting SIDs %v", got)
	}
	for _, s := range got {
		for _, broad := range []string{user, "S-1-5-32-545", "S-1-5-11", SIDRestrictedCode} {
			if s == broad {
				t.Errorf("restricting SID %s would let writes pass wherever the user or all users may write", s)
			}
		}
	}
	a, err := NewCapabilitySID(strings.NewReader("0123456789abcdef"))
	if err != nil || !strings.HasPrefix(a, "S-1-15-3-1024-") || strings.Count(a, "-") != 8 {
		t.Errorf("capability SID %q %v", a, err)
	}
	b, _ := NewCapabilitySID(strings.NewReader("fedcba9876543210"))
	if a == b {
		t.Error("different randomness gave the same SID")
	}
	if _, err := NewCapabilitySID(strings.NewReader("short")); err == nil {
		t.Error("short randomness accepted")
	}
}
