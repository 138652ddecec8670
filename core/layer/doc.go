// Package layer is the host side of a layered workspace: a session sees its
// workspace through an overlay whose upper layer is the session's own, and
// the host's directory (the lower layer) is untouched until the user
// applies what the session changed. It reads upper layers as overlayfs
// writes them (whiteouts, opaque directories), lists and diffs the
// changes, applies them to the host with everything that must never reach
// the host refused, and discards layers. Mounting the overlay is the
// driver's; this package never mounts anything and never runs a program
// the session wrote.
package layer
