package service

import (
	"path/filepath"

	"github.com/aleph-sandbox/aleph-sandbox/driverapi"
)

// Canonical resolves symbolic links as far as the path exists (the rest
// is kept as named), so a path naming a link to the socket's directory,
// or one below a linked directory not yet created, is seen for what it is.
func Canonical(p string) string {
	p = filepath.Clean(p)
	if r, err := filepath.EvalSymlinks(p); err == nil {
		return r
	}
	dir, base := filepath.Split(p)
	if dir == "" || dir == p {
		return p
	}
	return filepath.Join(Canonical(filepath.Clean(dir)), base)
}

// Covers reports whether access to p would reach protected directory d:
// p is d, inside it, or an ancestor of it. Both are compared as given:
// pass them through Canonical first.
func Covers(p, d string) bool {
	return driverapi.PathWithin(p, d) || driverapi.PathWithin(d, p)
}

// Within reports whether p is d or lies inside it, by name and by where
// both resolve (Canonical): what a sandbox confined to d can reach.
func Within(p, d string) bool {
	return driverapi.PathWithin(filepath.Clean(p), filepath.Clean(d)) ||
		driverapi.PathWithin(Canonical(p), Canonical(d))
}
