#!/usr/bin/env bash
# tern quickstart: install dependencies, build tern, benchmark it against
# PostgreSQL direct and PgBouncer.  Extra arguments go to the driver, e.g.
#   bench/quickstart.sh --duration 30 --clients 1,64,256
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
echo "==> repo: $(pwd)"

echo "==> installing missing dependencies (tools/install-deps.sh)"
bash tools/install-deps.sh

if [[ ! -f meson.build ]]; then
    echo "error: no meson.build in $(pwd): tern cannot be built yet" >&2
    echo "       (benchmark without it: python3 bench/pgbench_driver.py --targets direct,pgbouncer)" >&2
    exit 1
fi
# A release build of its own, so the test suite's debug builds never get benchmarked.
if [[ ! -f build-release/meson-private/coredata.dat ]]; then
    echo "==> configuring: meson setup build-release --buildtype=release"
    meson setup build-release --buildtype=release
else
    echo "==> build-release/ already configured"
fi
echo "==> building: meson compile -C build-release"
meson compile -C build-release

# The driver needs only the standard library: prefer the system python3
# (override with PYTHON=...).
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
# tern and PgBouncer reach PostgreSQL over its Unix socket, as a proxy on the database's host would.
echo "==> benchmarking: $PYTHON bench/pgbench_driver.py --targets tern,direct,pgbouncer --workloads select-only,tpcb-like --modes extended --clients 1,16,64 --duration 10 --server-socket --tern-binary build-release/tern $*"
exec "$PYTHON" bench/pgbench_driver.py \
    --tern-binary build-release/tern \
    --targets tern,direct,pgbouncer \
    --workloads select-only,tpcb-like \
    --modes extended \
    --clients 1,16,64 \
    --duration 10 \
    --server-socket \
    "$@"
