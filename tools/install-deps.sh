#!/usr/bin/env bash
# Install the Debian 12 packages tern needs (build, tests, benchmarks), but only
# those that are missing.  Never starts or enables a system service: while
# installing, a temporary /usr/sbin/policy-rc.d (if none exists) tells
# invoke-rc.d not to start anything.  The Debian postgresql package may create
# a "15/main" cluster; it is left alone -- the test harness uses its own data
# directories and ports.
set -euo pipefail

PACKAGES=(
    build-essential meson ninja-build pkg-config
    liburing-dev libpq-dev libssl-dev libmimalloc-dev libinih-dev
    libcriterion-dev libpg-query-dev libxxhash-dev libmicrohttpd-dev
    libjansson-dev
    postgresql postgresql-contrib pgbouncer
    python3 clang
    systemd groff-base man-db
    patroni etcd-server etcd-client
    python3-psycopg python3-prometheus-client python3-matplotlib nodejs openjdk-17-jdk-headless libpostgresql-jdbc-java
)
# npm for the node-postgres client test; a nodejs from NodeSource ships its own npm and conflicts
# with Debian's npm package.
command -v npm >/dev/null 2>&1 || PACKAGES+=(npm)

missing=()
for pkg in "${PACKAGES[@]}"; do
    status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
    if [[ "$status" != "install ok installed" ]]; then
        missing+=("$pkg")
    fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
    echo "install-deps: all dependencies present"
    exit 0
fi

SUDO=()
if [[ $(id -u) -ne 0 ]]; then
    if command -v sudo >/dev/null 2>&1; then
        SUDO=(sudo)
    else
        echo "install-deps: missing packages: ${missing[*]}" >&2
        echo "install-deps: not root and no sudo: install them as root" >&2
        exit 1
    fi
fi

echo "install-deps: missing packages: ${missing[*]}"

POLICY=/usr/sbin/policy-rc.d
created_policy=0
cleanup() {
    if [[ $created_policy -eq 1 ]]; then
        "${SUDO[@]}" rm -f "$POLICY"
    fi
}
trap cleanup EXIT
if [[ ! -e $POLICY ]]; then
    # exit status 101 = "action forbidden by policy": no service is started
    printf '#!/bin/sh\n# temporary, tern tools/install-deps.sh\nexit 101\n' |
        "${SUDO[@]}" tee "$POLICY" >/dev/null
    "${SUDO[@]}" chmod 755 "$POLICY"
    created_policy=1
fi

echo "install-deps: apt-get update"
"${SUDO[@]}" apt-get update
echo "install-deps: apt-get install ${missing[*]}"
"${SUDO[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "${missing[@]}"
echo "install-deps: done"
