#!/usr/bin/env python3
"""tern as an operator installs it: what `meson install` puts down (the binary, tern(1), the systemd
unit), the unit as systemd reads it (systemd-analyze verify), the manual page as man renders it, and
the readiness protocol a Type=notify unit relies on (READY=1 once tern listens, RELOADING=1 and READY=1
around a SIGHUP, STOPPING=1 at SIGTERM). No PostgreSQL: tern starts and listens with its server down.

usage: run_packaging.py [-k SUBSTRING]...   (TERN_BINARY, TERN_BUILD_ROOT and TERN_SOURCE_ROOT from meson)"""
import argparse
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from pgcluster import free_port  # noqa: E402
from procs import TernProcess  # noqa: E402

ROOT = os.environ.get("TERN_SOURCE_ROOT", os.path.dirname(os.path.dirname(HERE)))
TERN = os.environ.get("TERN_BINARY", os.path.join(ROOT, "build", "tern"))
BUILD = os.environ.get("TERN_BUILD_ROOT", os.path.dirname(os.path.abspath(TERN)))
SUITE_DEADLINE_S = 300
CASES = []


def case(fn):
    CASES.append(fn)
    return fn


def check(condition, what):
    if not condition:
        raise AssertionError(what)


def config_keys():
    """[(section, key)] of every config key, from tern's own table."""
    out = subprocess.run([TERN, "--help-config"], capture_output=True, text=True, timeout=30, check=True).stdout
    return re.findall(r"^\[(\w+)\] (\w+)", out, re.M)


@case
def meson_install_puts_the_binary_the_manual_page_and_the_systemd_unit():
    dest = tempfile.mkdtemp(prefix="tern-install-")
    try:
        r = subprocess.run(["meson", "install", "-C", BUILD, "--no-rebuild", "--destdir", dest],
                           capture_output=True, text=True, timeout=120)
        check(r.returncode == 0, "meson install: %s%s" % (r.stdout[-2000:], r.stderr[-2000:]))
        installed = {os.path.relpath(os.path.join(d, f), dest) for d, _, fs in os.walk(dest) for f in fs}
        for want in ("bin/tern", "share/man/man1/tern.1", "lib/systemd/system/tern.service"):
            check(any(path.endswith(want) for path in installed), "%s installed: %s" % (want, sorted(installed)))
        unit = next(p for p in installed if p.endswith("lib/systemd/system/tern.service"))
        binary = next(p for p in installed if p.endswith("bin/tern"))
        text = open(os.path.join(dest, unit)).read()
        check(not re.search(r"@[A-Z]+@", text), "every @PLACEHOLDER@ filled: %s" % text)
        check("ExecStart=/%s -c " % binary in text, "ExecStart names the installed binary (/%s)" % binary)
    finally:
        shutil.rmtree(dest, ignore_errors=True)


@case
def systemd_analyze_verifies_the_unit_with_nothing_to_say():
    """The unit as built, with ExecStart pointed at this build's binary (the installed path need not
    exist here): systemd-analyze verify exits 0 and prints nothing (it prints a warning, and still exits
    0, for an unknown option or system-call group). --man=no: tern(1) is not installed on this machine."""
    work = tempfile.mkdtemp(prefix="tern-unit-")
    try:
        text = open(os.path.join(BUILD, "tern.service")).read()
        text = re.sub(r"^ExecStart=\S+", "ExecStart=%s" % os.path.abspath(TERN), text, flags=re.M)
        path = os.path.join(work, "tern.service")
        with open(path, "w") as f:
            f.write(text)
        r = subprocess.run(["systemd-analyze", "verify", "--man=no", path], capture_output=True, text=True,
                           timeout=60)
        check(r.returncode == 0 and not (r.stdout + r.stderr).strip(),
              "systemd-analyze verify: rc %d: %s%s" % (r.returncode, r.stdout, r.stderr))
        for line in ("Type=notify", "ExecReload=/bin/kill -HUP $MAINPID", "SystemCallFilter=@system-service",
                     "NoNewPrivileges=yes", "User=tern"):
            check(line in text, "the unit has %s" % line)
        groups = {}
        for group in ("@system-service", "@aio"):
            r = subprocess.run(["systemd-analyze", "syscall-filter", group], capture_output=True, text=True,
                               timeout=60)
            groups[group] = r.stdout.split()
        check("@aio" in groups["@system-service"] and all(
            name in groups["@aio"] for name in ("io_uring_setup", "io_uring_enter", "io_uring_register")),
              "the unit's system-call filter lets io_uring run: %r" % groups)
    finally:
        shutil.rmtree(work, ignore_errors=True)


@case
def the_manual_page_renders_without_warnings_and_names_every_config_key():
    page = os.path.join(BUILD, "tern.1")
    r = subprocess.run(["groff", "-man", "-ww", "-z", page], capture_output=True, text=True, timeout=60)
    check(r.returncode == 0 and not r.stderr.strip(), "groff warnings: %s" % r.stderr)
    r = subprocess.run(["man", "-l", page], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, MANWIDTH="100", MAN_KEEP_FORMATTING="0"))
    check(r.returncode == 0, "man -l: %s" % r.stderr)
    text = re.sub(r".\x08", "", r.stdout)
    sections = re.findall(r"^   \[(\w+)\]$", text, re.M)
    keys = config_keys()
    for section, key in keys:
        check(section in sections and re.search(r"^       %s +=" % re.escape(key), text, re.M),
              "[%s] %s in tern(1)" % (section, key))
    check(len(keys) > 50 and "SIGHUP" in text and "NOTIFY_SOCKET" in text, "the page's other sections")


def notify_messages(sock, want, timeout=15):
    """Datagrams from tern until one holding `want`; all of them, in order."""
    got = []
    deadline = time.monotonic() + timeout
    while not any(want in m for m in got):
        sock.settimeout(max(0.1, deadline - time.monotonic()))
        try:
            got.append(sock.recv(4096).decode())
        except socket.timeout:
            raise AssertionError("no %s from tern within %ss (got %r)" % (want, timeout, got))
    return got


@case
def tern_tells_systemd_when_it_is_ready_reloading_and_stopping():
    for abstract in (False, True):
        work = tempfile.mkdtemp(prefix="tern-notify-")
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        address = "\0tern-notify-%d" % os.getpid() if abstract else os.path.join(work, "notify")
        sock.bind(address)
        os.environ["NOTIFY_SOCKET"] = "@" + address[1:] if abstract else address
        try:
            t = TernProcess(TERN, "[tern]\nlisten = 127.0.0.1:%d\n[servers]\nprimary = host=127.0.0.1 port=1\n"
                            % free_port())
            t.start()
            try:
                got = notify_messages(sock, "READY=1")
                check(got[-1].splitlines()[0] == "READY=1", "READY=1 once it listens: %r" % got)
                os.kill(t.pid, signal.SIGHUP)
                got = notify_messages(sock, "READY=1")
                lines = got[0].splitlines()
                check(lines[0] == "RELOADING=1" and got[-1].startswith("READY=1"), "a reload: %r" % got)
                usec = int(lines[1].split("=", 1)[1]) if len(lines) > 1 and lines[1].startswith("MONOTONIC_USEC=") else 0
                check(abs(usec / 1e6 - time.monotonic()) < 60, "with the monotonic time systemd 253+ asks: %r" % got)
                os.kill(t.pid, signal.SIGTERM)
                got = notify_messages(sock, "STOPPING=1")
                check(got[-1].startswith("STOPPING=1"), "a stop: %r" % got)
                deadline = time.monotonic() + 15
                while t.alive() and time.monotonic() < deadline:
                    time.sleep(0.05)
                check(not t.alive() and t.returncode == 0, "tern exited 0 after the drain")
            finally:
                t.stop()
        finally:
            del os.environ["NOTIFY_SOCKET"]
            sock.close()
            shutil.rmtree(work, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("-k", action="append", default=[], help="run cases whose name contains this")
    args = parser.parse_args()
    if not os.path.exists(TERN):
        print("tern binary not found at %s" % TERN)
        return 1
    signal.alarm(SUITE_DEADLINE_S)
    passed = failed = 0
    for fn in CASES:
        if args.k and not any(k in fn.__name__ for k in args.k):
            continue
        t0 = time.monotonic()
        try:
            fn()
            passed += 1
            print("PASS %s (%.1fs)" % (fn.__name__, time.monotonic() - t0), flush=True)
        except Exception:
            failed += 1
            print("FAIL %s (%.1fs)\n%s" % (fn.__name__, time.monotonic() - t0, traceback.format_exc()), flush=True)
    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
