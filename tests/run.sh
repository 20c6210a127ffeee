#!/usr/bin/env bash
# Builds tern and runs every test suite — unit (Criterion), fuzz-corpus replay and integration (a real
# PostgreSQL primary + streaming replica on loopback) — twice: in the normal build, and in a build with
# AddressSanitizer + UndefinedBehaviorSanitizer. Installs missing Debian packages first.
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n== %s\n' "$*"; }

step "dependencies"
tools/install-deps.sh

build_and_test() {
	local dir=$1
	shift
	step "build $dir ($*)"
	if [ -f "$dir/meson-private/coredata.dat" ]; then
		meson configure "$dir" --werror "$@" >/dev/null
	else
		meson setup "$dir" --werror "$@"
	fi
	meson compile -C "$dir"
	step "test $dir"
	meson test -C "$dir" --print-errorlogs --num-processes 2
}

build_and_test build -Dbuildtype=debugoptimized
build_and_test build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

step "all suites passed in both builds"
