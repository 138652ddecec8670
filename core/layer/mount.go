package layer

import (
	"fmt"
	"path/filepath"
	"strings"
)

// MountSpec is the overlay a session's sandbox mounts over the workspace:
// the only overlay configuration this engine reads correctly.
//
// Why each option:
//   - redirect_dir=nofollow: overlayfs neither writes nor follows
//     redirect xattrs, so renaming a directory that comes from the
//     workspace fails with EXDEV and tools copy it instead (mv does): the
//     upper layer then says plainly what the session sees, with no
//     pointer to elsewhere in the lower. "off" means "follow" on kernels
//     built with redirect_always_follow (this one is) and is refused
//     together with userxattr; "nofollow" is accepted with both.
//   - metacopy=off: a copied-up file's data is always in the upper; with
//     metacopy the upper could hold only metadata over the lower's data.
//   - index=off, xino=off: no index directory, no inode number games; the
//     upper's inodes are plain inodes of its file system (hard link
//     counts mean what they say).
//   - userxattr (in a user namespace): overlayfs keeps its whiteout and
//     opaque markers in user.overlay.* instead of trusted.overlay.*,
//     which only the initial namespace's root may write.
//
// Entries carrying redirect or metacopy xattrs anyway are refused by Apply
// (RefusedOverlayXattr).
type MountSpec struct {
	Lower, Upper, Work string
	UserNS             bool
}

// Options are the fixed options besides the directories.
func (m MountSpec) Options() []string {
	o := []string{"redirect_dir=nofollow", "metacopy=off", "index=off", "xino=off"}
	if m.UserNS {
		o = append(o, "userxattr")
	}
	return o
}

// Data is the mount(2) data string
// ("lowerdir=...,upperdir=...,workdir=...,redirect_dir=nofollow,...").
// Paths holding a comma, colon, backslash or newline are refused rather
// than escaped: the escaping of overlayfs's option parser has changed
// across kernels, and a misread path would mount something else. A driver
// that uses fsconfig(2) can take the fields as they are.
func (m MountSpec) Data() (string, error) {
	for _, p := range []struct{ what, path string }{{"lowerdir", m.Lower}, {"upperdir", m.Upper}, {"workdir", m.Work}} {
		if !filepath.IsAbs(p.path) {
			return "", &LayerError{Dir: p.path, Reason: p.what + " must be an absolute path"}
		}
		if strings.ContainsAny(p.path, ",:\\\n") {
			return "", &LayerError{Dir: p.path, Reason: fmt.Sprintf("%s holds a comma, colon, backslash or newline, which the overlay mount options cannot carry; move it", p.what)}
		}
	}
	return fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s,%s", m.Lower, m.Upper, m.Work, strings.Join(m.Options(), ",")), nil
}
