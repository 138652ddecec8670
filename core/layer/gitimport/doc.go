// Package gitimport brings what a layered session committed into the host's
// repository: layer.GitImporter implemented with the host's own git.
//
// The session's .git (in the overlay's upper layer) was written by a
// sandboxed command, so it is data, never a repository:
//
//   - no git ever runs with it as its repository, its working directory or
//     its GIT_DIR, so its config (core.fsmonitor, core.pager, aliases,
//     filters, sshCommand...), hooks, info/attributes, commondir and
//     objects/info/alternates are never read by anything (the changed ones
//     are reported as not imported);
//   - it is read in Go through descriptors, each directory opened relative
//     to its parent with O_NOFOLLOW and each file checked to be a regular
//     file on its open descriptor, with bounded sizes: a symlink planted
//     anywhere is refused, never followed;
//   - every object is checked against its name (the SHA-1 of "type
//     size\0content"), loose ones after a bounded inflate, packed ones at
//     the offsets their (untrusted) .idx gives, deltas applied with every
//     copy bounds-checked;
//   - ref names pass git's check-ref-format rules (CheckRefFormat) and must
//     be under refs/heads or refs/tags, values must be 40-digit ids
//     (64-digit ones mark a SHA-256 repository: refused, the config that
//     would say so is not read).
//
// Only what the imported refs reach and the host does not have is written,
// as one pack of whole objects streamed into the host's
// `git index-pack --stdin --strict` run in the host repository (the way a
// fetch indexes untrusted data: fsck checks, and every object linked must
// be present). Trees bringing a gitlink or a changed .gitmodules are
// refused first. The host's git runs with an environment made from nothing
// but PATH, HOME, XDG_CONFIG_HOME, LC_ALL=C and GIT_DIR set to the host's
// .git: nothing of the caller's GIT_* variables can redirect it.
//
// Refs then move with `git update-ref <ref> <new> <old>`, atomic against a
// concurrent change on the host; see layer.GitImporter for the rules.
package gitimport
