// Package e2e holds end-to-end tests that run commands through core, the
// managed network proxy and the real sandbox driver plugin together, with
// no piece replaced by a fake. It has no code of its own.
package e2e
