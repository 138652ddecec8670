// Package fleet tests the shipped fleet manifests (contrib/kubernetes,
// contrib/haproxy, contrib/container): their types against the published
// APIs, and, with podman and HAProxy, a fleet of serve pods on this
// machine (fleet_linux_test.go; make test-fleet).
package fleet
