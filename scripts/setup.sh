#!/usr/bin/env bash
# Installs the system packages aleph-sandbox and its tests use (Debian/Ubuntu).
set -euo pipefail
pkgs="bubblewrap protobuf-compiler iproute2 curl"
sudo=""
[ "$(id -u)" = 0 ] || sudo="sudo"
export DEBIAN_FRONTEND=noninteractive
$sudo apt-get update -qq
$sudo apt-get install -y -qq $pkgs >/dev/null
