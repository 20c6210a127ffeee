#!/usr/bin/env bash
# Builds tern and runs every test suite — unit (Criterion), fuzz-corpus replay and integration (a real
# PostgreSQL primary + streaming replica on loopback) — twice: in the normal build, and in a build with
# AddressSanitizer + UndefinedBehaviorSanitizer; then the integration cases that exercise threads (reload,
# admin console, cancels, shutdown, many clients) against a ThreadSanitizer build of tern, where any
# data race report fails the case; then a subset of the integration suite once more on the epoll backend
# ([tern] io_backend = epoll, what tern falls back to where io_uring is refused). Installs missing Debian
# packages first.
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
# A small quarantine: AddressSanitizer keeps freed blocks out of reuse for a while (256 MB by default),
# which the tests that measure tern's resident memory would read as growth.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}quarantine_size_mb=8" \
	build_and_test build-asan -Dbuildtype=debug -Db_sanitize=address,undefined -Db_lundef=false

step "build build-tsan (tern only)"
if [ ! -f build-tsan/meson-private/coredata.dat ]; then
	meson setup build-tsan --werror -Dbuildtype=debugoptimized -Db_sanitize=thread -Db_lundef=false >/dev/null
fi
meson compile -C build-tsan tern
step "test build-tsan: threaded integration cases"
set +e
# Debian's python3 (the suite's clients use its python3-psycopg), as meson test runs it.
PYTHON=$(command -v /usr/bin/python3 || command -v python3)
TERN_BINARY=build-tsan/tern TSAN_OPTIONS="halt_on_error=0 exitcode=66" \
	"$PYTHON" tests/integration/run_integration.py -k sighup -k admin_ -k cancel -k sigterm \
	-k pgbench_prepared_tpcb -k tls_sighup -k server_tls_verify_full -k replica_reads -k reads_wait_while \
	-k split_reads_see 2>&1 | tee build-tsan/integration.log
set -e

step "test build: integration cases on the epoll backend"
set +e
# Every tern the harness starts gets [tern] io_backend = epoll (tests/integration/procs.py). A subset:
# the whole suite takes about 5 minutes, past what CI has left of its 30. These cover pooling (parked
# clients, pgbench), TLS, cancels, buffer starvation and back pressure (-ENOBUFS, recalled sends), lost
# servers and Transaction Replay's moved sessions, the admin console and the shutdown drain: about 90 s.
# (Run the whole suite on epoll by hand: TERN_IO_BACKEND=epoll tests/integration/run_integration.py.)
TERN_IO_BACKEND=epoll TERN_BINARY="$PWD/build/tern" "$PYTHON" tests/integration/run_integration.py \
	-k in_transaction_pooling -k session_pooling -k parked_clients -k ten_times_more_clients \
	-k pgbench_prepared_tpcb -k tls_ -k cancel -k admin_ -k the_admin_console -k stops_reading -k starved \
	-k tiny_buffer_ring -k pipelines_without_reading -k large_result -k copy_in_and_out -k killed_mid_query \
	-k restarted_mid_session -k recovery_that_stalls -k replica_connection_is_terminated -k sigterm_drains \
	-k io_uring_blocked 2>&1 | tee build/integration-epoll.log
set -e

# One closing line over both builds, counting the cases inside each test program: Criterion's
# synthesis, and the "N passed, N failed" line of the integration suite and of the corpus replays.
python3 - build build-asan <<'PY'
import json, re, sys
passed = failed = 0
for log in ("build-tsan/integration.log", "build/integration-epoll.log"):
    counts = re.findall(r"^(\d+) passed, (\d+) failed$", open(log).read(), re.M)
    if counts:
        passed += int(counts[-1][0])
        failed += int(counts[-1][1])
    else:
        failed += 1  # the run ended before its summary
for build in sys.argv[1:]:
    for line in open(build + "/meson-logs/testlog.json"):
        test = json.loads(line)
        out = (test.get("stdout") or "") + (test.get("stderr") or "")
        criterion = re.search(r"Synthesis: Tested: \d+ \| Passing: (\d+) \| Failing: (\d+) \| Crashing: (\d+)", out)
        plain = re.search(r"^(\d+) passed, (\d+) failed$", out, re.M)
        if criterion:
            counts = (int(criterion.group(1)), int(criterion.group(2)) + int(criterion.group(3)))
        elif plain:
            counts = (int(plain.group(1)), int(plain.group(2)))
        else:
            counts = (0, 0)
        if test["result"] not in ("OK", "EXPECTEDFAIL") and counts[1] == 0:
            counts = (counts[0], 1)  # crashed or timed out before reporting
        passed += counts[0]
        failed += counts[1]
print("%d passed, %d failed" % (passed, failed))
sys.exit(1 if failed else 0)
PY
