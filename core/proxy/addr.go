package proxy

import "net/netip"

// AddressClass names why an address is special. The zero value is a
// globally routable address that the proxy may dial when a name rule allows
// the name.
type AddressClass int

const (
	ClassPublic AddressClass = iota
	ClassLoopback
	ClassPrivate
	ClassLinkLocal
	ClassCGNAT
	ClassMulticast
	ClassUnspecified
	ClassMetadata
	ClassReserved
)

func (c AddressClass) String() string {
	switch c {
	case ClassPublic:
		return "public"
	case ClassLoopback:
		return "loopback"
	case ClassPrivate:
		return "private"
	case ClassLinkLocal:
		return "link-local"
	case ClassCGNAT:
		return "cgnat"
	case ClassMulticast:
		return "multicast"
	case ClassUnspecified:
		return "unspecified"
	case ClassMetadata:
		return "cloud-metadata"
	case ClassReserved:
		return "reserved"
	}
	return "unknown"
}

// reason is the audit reason code used when a resolved address of this
// class is refused.
func (c AddressClass) reason() ReasonCode {
	switch c {
	case ClassLoopback:
		return ReasonRefusedLoopback
	case ClassPrivate:
		return ReasonRefusedPrivate
	case ClassLinkLocal:
		return ReasonRefusedLinkLocal
	case ClassCGNAT:
		return ReasonRefusedCGNAT
	case ClassMulticast:
		return ReasonRefusedMulticast
	case ClassUnspecified:
		return ReasonRefusedUnspecified
	case ClassMetadata:
		return ReasonRefusedMetadata
	}
	return ReasonRefusedReserved
}

var (
	metadataV4 = netip.MustParseAddr("169.254.169.254")
	metadataV6 = netip.MustParseAddr("fd00:ec2::254")
	// Alibaba Cloud's metadata service sits inside CGNAT space; it is named
	// here so the audit record says what it is.
	metadataAlibaba = netip.MustParseAddr("100.100.100.200")

	cgnat       = netip.MustParsePrefix("100.64.0.0/10")
	thisNetwork = netip.MustParsePrefix("0.0.0.0/8")
	reservedV4  = netip.MustParsePrefix("240.0.0.0/4")
	ietfProtoV4 = netip.MustParsePrefix("192.0.0.0/24")
	benchmarkV4 = netip.MustParsePrefix("198.18.0.0/15")
	nat64       = netip.MustParsePrefix("64:ff9b::/96")
	nat64Local  = netip.MustParsePrefix("64:ff9b:1::/48")
	discardV6   = netip.MustParsePrefix("100::/64")
	siteLocalV6 = netip.MustParsePrefix("fec0::/10")
	sixToFour   = netip.MustParsePrefix("2002::/16")
	teredo      = netip.MustParsePrefix("2001::/32")
)

// Classify says whether addr is special. IPv4-mapped, NAT64 and 6to4
// addresses are judged by the IPv4 address they embed, because that is
// where a packet to them ends up.
func Classify(addr netip.Addr) AddressClass {
	addr = addr.WithZone("")
	if addr.Is4In6() {
		addr = addr.Unmap()
	}
	if addr.Is6() {
		switch {
		case nat64.Contains(addr):
			b := addr.As16()
			return Classify(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]}))
		case sixToFour.Contains(addr):
			b := addr.As16()
			if c := Classify(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); c != ClassPublic {
				return c
			}
		}
	}
	switch {
	case !addr.IsValid():
		return ClassReserved
	case addr == metadataV4 || addr == metadataV6 || addr == metadataAlibaba:
		return ClassMetadata
	case addr.IsUnspecified() || thisNetwork.Contains(addr):
		return ClassUnspecified
	case addr.IsLoopback():
		return ClassLoopback
	case addr.IsLinkLocalUnicast() || addr.IsLinkLocalMulticast():
		if addr.IsMulticast() {
			return ClassMulticast
		}
		return ClassLinkLocal
	case addr.IsMulticast() || addr.IsInterfaceLocalMulticast():
		return ClassMulticast
	case addr.IsPrivate() || siteLocalV6.Contains(addr):
		return ClassPrivate
	case cgnat.Contains(addr):
		return ClassCGNAT
	case reservedV4.Contains(addr), ietfProtoV4.Contains(addr), benchmarkV4.Contains(addr),
		nat64Local.Contains(addr), discardV6.Contains(addr), teredo.Contains(addr):
		return ClassReserved
	}
	return ClassPublic
}
