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
if [[ ! -f build/meson-private/coredata.dat ]]; then
    echo "==> configuring: meson setup build --buildtype=release"
    meson setup build --buildtype=release
else
    echo "==> build/ already configured"
fi
echo "==> building: meson compile -C build"
meson compile -C build

# The driver needs only the standard library: prefer the system python3
# (override with PYTHON=...).
if [[ -z ${PYTHON:-} ]]; then
    if [[ -x /usr/bin/python3 ]]; then PYTHON=/usr/bin/python3; else PYTHON=python3; fi
fi
echo "==> benchmarking: $PYTHON bench/pgbench_driver.py --targets tern,direct,pgbouncer --workloads select-only,tpcb-like --modes extended --clients 1,16,64 --duration 10 $*"
exec "$PYTHON" bench/pgbench_driver.py \
    --targets tern,direct,pgbouncer \
    --workloads select-only,tpcb-like \
    --modes extended \
    --clients 1,16,64 \
    --duration 10 \
    "$@"
