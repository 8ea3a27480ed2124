#!/usr/bin/env bash
# Installs a built tree as a user would and uses it from outside: `cmake --install` into a
# temporary prefix, then the Debian package from `cpack -G DEB`; each time the consumer
# projects (tests/consumer: CMake package, pkg-config + make) build and run on softrdma, and
# `softrdma-run ibv_devinfo` finds the device. Usage: scripts/package-check.sh [build dir]
set -euo pipefail
cd "$(dirname "$0")/.."
build="$(cd "${1:-build}" && pwd)"
prefix="$(mktemp -d)"
trap 'rm -rf "$prefix"' EXIT
SUDO=""
[ "$(id -u)" -ne 0 ] && SUDO=sudo

echo "::: cmake --install into $prefix"
cmake --install "$build" --prefix "$prefix" > /dev/null
tests/consumer/run.sh "$prefix"
"$prefix/bin/softrdma-run" ibv_devinfo | grep -q softrdma0

echo "::: the Debian package"
(cd "$build" && rm -f rdmakit_*.deb && cpack -G DEB > /dev/null)
deb="$(ls "$build"/rdmakit_*.deb)"
$SUDO apt-get install -y -q "$deb" > /dev/null
tests/consumer/run.sh /usr
softrdma-run ibv_devinfo | grep -q softrdma0
echo "ok: $(basename "$deb") installs, and the programs built against it run"
$SUDO dpkg -r rdmakit > /dev/null
