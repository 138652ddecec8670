//go:build windows

package appcontainer

import (
	"errors"
	"fmt"
	"os"
	"strings"
	"unsafe"

	"golang.org/x/sys/windows"
)

// explicitAccess builds one SetEntriesInAcl entry for sid.
func explicitAccess(sid *windows.SID, mask uint32, mode windows.ACCESS_MODE, inherit bool) windows.EXPLICIT_ACCESS {
	inh := uint32(windows.NO_INHERITANCE)
	if inherit {
		inh = windows.SUB_CONTAINERS_AND_OBJECTS_INHERIT
	}
	return windows.EXPLICIT_ACCESS{
		AccessPermissions: windows.ACCESS_MASK(mask),
		AccessMode:        mode,
		Inheritance:       inh,
		Trustee: windows.TRUSTEE{
			TrusteeForm:  windows.TRUSTEE_IS_SID,
			TrusteeType:  windows.TRUSTEE_IS_UNKNOWN,
			TrusteeValue: windows.TrusteeValueFromSID(sid),
		},
	}
}

// mergeDACL reads path's DACL, merges entries into it and writes it back.
// SetNamedSecurityInfo propagates inheritable entries to the children.
func mergeDACL(path string, entries []windows.EXPLICIT_ACCESS) error {
	sd, err := windows.GetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, windows.DACL_SECURITY_INFORMATION)
	if err != nil {
		return fmt.Errorf("read ACL of %s: %w", path, err)
	}
	dacl, _, err := sd.DACL()
	if err != nil {
		return fmt.Errorf("read ACL of %s: %w", path, err)
	}
	acl, err := windows.ACLFromEntries(entries, dacl)
	if err != nil {
		return fmt.Errorf("build ACL for %s: %w", path, err)
	}
	// A protected DACL (a placeholder's, or one the user protected) stays
	// protected: it must not start inheriting the workspace's grants,
	// which name the SIDs of other running commands.
	info := windows.SECURITY_INFORMATION(windows.DACL_SECURITY_INFORMATION)
	if ctl, _, err := sd.Control(); err != nil {
		return fmt.Errorf("read ACL of %s: %w", path, err)
	} else if ctl&windows.SE_DACL_PROTECTED != 0 {
		info |= windows.PROTECTED_DACL_SECURITY_INFORMATION
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, info, nil, nil, acl, nil); err != nil {
		return fmt.Errorf("write ACL of %s: %w", path, err)
	}
	return nil
}

// applyACE applies one planned ACE for sid.
func applyACE(a ACE, sid *windows.SID) error {
	mode := windows.GRANT_ACCESS
	if a.Deny {
		mode = windows.DENY_ACCESS
	}
	return mergeDACL(a.Path, []windows.EXPLICIT_ACCESS{explicitAccess(sid, a.Mask, windows.ACCESS_MODE(mode), a.Inherit)})
}

// revokeSID removes every entry naming sid from path's DACL.
func revokeSID(path string, sid *windows.SID) error {
	return mergeDACL(path, []windows.EXPLICIT_ACCESS{explicitAccess(sid, 0, windows.REVOKE_ACCESS, false)})
}

// applyLabel sets a mandatory label (no-write-up) on path.
func applyLabel(l Label) error {
	level := "ME"
	if l.Low {
		level = "LW"
	}
	return setLabelSDDL(l.Path, "S:(ML;OICI;NW;;;"+level+")", l.Protect)
}

// clearLabel removes an explicit label: the path inherits its parent's
// again (for a user's directory, usually the implicit Medium).
func clearLabel(path string) error {
	sd, err := windows.SecurityDescriptorFromString("S:")
	if err != nil {
		return err
	}
	sacl, _, err := sd.SACL()
	if err != nil {
		return err
	}
	return windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT,
		windows.LABEL_SECURITY_INFORMATION|windows.UNPROTECTED_SACL_SECURITY_INFORMATION, nil, nil, nil, sacl)
}

func setLabelSDDL(path, sddl string, protect bool) error {
	sd, err := windows.SecurityDescriptorFromString(sddl)
	if err != nil {
		return err
	}
	sacl, _, err := sd.SACL()
	if err != nil {
		return err
	}
	info := windows.SECURITY_INFORMATION(windows.LABEL_SECURITY_INFORMATION)
	if protect {
		info |= windows.PROTECTED_SACL_SECURITY_INFORMATION
	}
	if err := windows.SetNamedSecurityInfo(path, windows.SE_FILE_OBJECT, info, nil, nil, nil, sacl); err != nil {
		return fmt.Errorf("set integrity label on %s: %w", path, err)
	}
	return nil
}

// restrictedLowToken makes the restricted tier's token: the process
// token with every privilege but SeChangeNotify removed, WRITE_RESTRICTED,
// the restricting SIDs of RestrictingSIDs (capSID, the logon SID,
// Everyone; never the user), at Low integrity.
func restrictedLowToken(capSID *windows.SID) (windows.Token, error) {
	var tok windows.Token
	access := uint32(windows.TOKEN_DUPLICATE | windows.TOKEN_QUERY | windows.TOKEN_ASSIGN_PRIMARY | windows.TOKEN_ADJUST_DEFAULT)
	if err := windows.OpenProcessToken(windows.CurrentProcess(), access, &tok); err != nil {
		return 0, fmt.Errorf("OpenProcessToken: %w", err)
	}
	defer tok.Close()
	groups, err := tok.GetTokenGroups()
	if err != nil {
		return 0, fmt.Errorf("GetTokenGroups: %w", err)
	}
	logon := ""
	for _, g := range groups.AllGroups() {
		if g.Attributes&windows.SE_GROUP_LOGON_ID == windows.SE_GROUP_LOGON_ID {
			logon = g.Sid.String()
			break
		}
	}
	var restrict []windows.SIDAndAttributes
	for _, str := range RestrictingSIDs(capSID.String(), logon) {
		sid, err := windows.StringToSid(str)
		if err != nil {
			return 0, fmt.Errorf("restricting SID %s: %w", str, err)
		}
		restrict = append(restrict, windows.SIDAndAttributes{Sid: sid})
	}
	rt, err := createRestrictedToken(tok, RestrictedTokenFlags, restrict)
	if err != nil {
		return 0, err
	}
	low, err := windows.CreateWellKnownSid(windows.WinLowLabelSid)
	if err != nil {
		rt.Close()
		return 0, err
	}
	tml := windows.Tokenmandatorylabel{Label: windows.SIDAndAttributes{Sid: low, Attributes: windows.SE_GROUP_INTEGRITY}}
	if err := windows.SetTokenInformation(rt, windows.TokenIntegrityLevel, (*byte)(unsafe.Pointer(&tml)), tml.Size()); err != nil {
		rt.Close()
		return 0, fmt.Errorf("SetTokenInformation(TokenIntegrityLevel, Low): %w", err)
	}
	return rt, nil
}

// osFS reads attributes with GetFileAttributes, which reports every kind
// of reparse point (os.Lstat names only some of them symlinks).
type osFS struct{}

func (osFS) Lstat(path string) (FileInfo, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return FileInfo{}, err
	}
	attrs, err := windows.GetFileAttributes(p)
	if err != nil {
		if errors.Is(err, windows.ERROR_FILE_NOT_FOUND) || errors.Is(err, windows.ERROR_PATH_NOT_FOUND) {
			return FileInfo{}, nil
		}
		return FileInfo{}, err
	}
	return FileInfo{Exists: true,
		IsDir:   attrs&windows.FILE_ATTRIBUTE_DIRECTORY != 0,
		Reparse: attrs&windows.FILE_ATTRIBUTE_REPARSE_POINT != 0}, nil
}

func isRegularFile(path string) bool {
	fi, err := os.Stat(path)
	return err == nil && fi.Mode().IsRegular()
}

// LongPath makes path fully qualified (GetFullPathNameW) and expands the
// 8.3 short names of its existing components (GetLongPathNameW). The part
// below the deepest existing ancestor is kept as given; CanonicalPath
// refuses a short-name-shaped component there.
func (osFS) LongPath(path string) (string, error) {
	full, err := fullPathName(path)
	if err != nil {
		return "", err
	}
	return longPathName(full)
}

func fullPathName(path string) (string, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return "", err
	}
	buf := make([]uint16, windows.MAX_PATH)
	for {
		n, err := windows.GetFullPathName(p, uint32(len(buf)), &buf[0], nil)
		if err != nil {
			return "", fmt.Errorf("GetFullPathNameW(%s): %w", path, err)
		}
		if int(n) < len(buf) {
			return windows.UTF16ToString(buf[:n]), nil
		}
		buf = make([]uint16, n)
	}
}

func longPathName(path string) (string, error) {
	p, err := windows.UTF16PtrFromString(path)
	if err != nil {
		return "", err
	}
	buf := make([]uint16, windows.MAX_PATH)
	for {
		n, err := windows.GetLongPathName(p, &buf[0], uint32(len(buf)))
		if errors.Is(err, windows.ERROR_FILE_NOT_FOUND) || errors.Is(err, windows.ERROR_PATH_NOT_FOUND) {
			// Expand the existing ancestor, keep the missing tail.
			vol, rest, ok := winVolume(path)
			if !ok || rest == `\` {
				return path, nil
			}
			i := strings.LastIndexByte(path, '\\')
			parent := path[:i]
			if len(parent) <= len(vol) {
				parent = vol + `\`
			}
			lp, err := longPathName(parent)
			if err != nil {
				return "", err
			}
			return WinJoin(lp, path[i+1:]), nil
		}
		if err != nil {
			return "", fmt.Errorf("GetLongPathNameW(%s): %w", path, err)
		}
		if int(n) < len(buf) {
			return windows.UTF16ToString(buf[:n]), nil
		}
		buf = make([]uint16, n)
	}
}
