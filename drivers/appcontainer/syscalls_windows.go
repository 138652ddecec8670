//go:build windows

package appcontainer

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/windows"
)

// The calls x/sys/windows does not wrap. Lazy system DLLs: loaded from
// System32 only, never from the current or application directory.
var (
	modUserenv                                    = windows.NewLazySystemDLL("userenv.dll")
	procCreateAppContainerProfile                 = modUserenv.NewProc("CreateAppContainerProfile")
	procDeleteAppContainerProfile                 = modUserenv.NewProc("DeleteAppContainerProfile")
	procDeriveAppContainerSidFromAppContainerName = modUserenv.NewProc("DeriveAppContainerSidFromAppContainerName")

	modAdvapi32               = windows.NewLazySystemDLL("advapi32.dll")
	procCreateRestrictedToken = modAdvapi32.NewProc("CreateRestrictedToken")
)

const (
	// procThreadAttributeSecurityCapabilities is
	// PROC_THREAD_ATTRIBUTE_SECURITY_CAPABILITIES (winbase.h).
	procThreadAttributeSecurityCapabilities = 0x00020009
)

// securityCapabilities is SECURITY_CAPABILITIES (winnt.h).
type securityCapabilities struct {
	AppContainerSid *windows.SID
	Capabilities    *windows.SIDAndAttributes
	CapabilityCount uint32
	Reserved        uint32
}

func hresultErr(call string, hr uintptr) error {
	if int32(hr) >= 0 {
		return nil
	}
	// HRESULT_FROM_WIN32 values carry the Win32 code in the low word.
	if hr&0xFFFF0000 == 0x80070000 {
		return fmt.Errorf("%s: %w", call, windows.Errno(hr&0xFFFF))
	}
	return fmt.Errorf("%s: HRESULT 0x%08X", call, uint32(hr))
}

// createAppContainerProfile creates the profile and returns its SID
// (free with windows.FreeSid).
func createAppContainerProfile(name, display, description string) (*windows.SID, error) {
	if err := procCreateAppContainerProfile.Find(); err != nil {
		return nil, err
	}
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	d, err := windows.UTF16PtrFromString(display)
	if err != nil {
		return nil, err
	}
	desc, err := windows.UTF16PtrFromString(description)
	if err != nil {
		return nil, err
	}
	var sid *windows.SID
	hr, _, _ := procCreateAppContainerProfile.Call(uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(d)),
		uintptr(unsafe.Pointer(desc)), 0, 0, uintptr(unsafe.Pointer(&sid)))
	if err := hresultErr("CreateAppContainerProfile", hr); err != nil {
		return nil, err
	}
	return sid, nil
}

func deleteAppContainerProfile(name string) error {
	if err := procDeleteAppContainerProfile.Find(); err != nil {
		return err
	}
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return err
	}
	hr, _, _ := procDeleteAppContainerProfile.Call(uintptr(unsafe.Pointer(n)))
	return hresultErr("DeleteAppContainerProfile", hr)
}

// deriveAppContainerSid finds the SID of an existing profile name (used
// to clean up a profile whose creation reported "already exists").
func deriveAppContainerSid(name string) (*windows.SID, error) {
	if err := procDeriveAppContainerSidFromAppContainerName.Find(); err != nil {
		return nil, err
	}
	n, err := windows.UTF16PtrFromString(name)
	if err != nil {
		return nil, err
	}
	var sid *windows.SID
	hr, _, _ := procDeriveAppContainerSidFromAppContainerName.Call(uintptr(unsafe.Pointer(n)), uintptr(unsafe.Pointer(&sid)))
	if err := hresultErr("DeriveAppContainerSidFromAppContainerName", hr); err != nil {
		return nil, err
	}
	return sid, nil
}

func createRestrictedToken(existing windows.Token, flags uint32, restrict []windows.SIDAndAttributes) (windows.Token, error) {
	if err := procCreateRestrictedToken.Find(); err != nil {
		return 0, err
	}
	var restrictPtr *windows.SIDAndAttributes
	if len(restrict) > 0 {
		restrictPtr = &restrict[0]
	}
	var out windows.Token
	r, _, e := procCreateRestrictedToken.Call(uintptr(existing), uintptr(flags), 0, 0, 0, 0,
		uintptr(len(restrict)), uintptr(unsafe.Pointer(restrictPtr)), uintptr(unsafe.Pointer(&out)))
	if r == 0 {
		return 0, fmt.Errorf("CreateRestrictedToken: %w", e)
	}
	return out, nil
}
