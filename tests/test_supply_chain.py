"""Supply chain: hash-checked installs, and scripts/audit_deps.sh's exit codes against a local advisory fixture.

The fixture is a real HTTP server on loopback speaking OSV's query API (`POST /v1/query`), which the real
pip-audit queries through `PIP_AUDIT_VULNERABILITY_SERVICE=osv` + `PIP_AUDIT_OSV_URL`.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
AUDIT = ROOT / "scripts" / "audit_deps.sh"
PINNED = re.compile(r"^([A-Za-z0-9_.-]+)==(\S+)")


def _requirements(lock: Path) -> dict:
    """{name==version: [hashes]} of a uv-generated lock (continuation lines carry the hashes)."""
    out, current = {}, None
    for line in lock.read_text().splitlines():
        match = PINNED.match(line)
        if match:
            current = f"{match.group(1)}=={match.group(2)}"
            out[current] = []
        elif current and "--hash=sha256:" in line:
            out[current].append(line.split("--hash=sha256:")[1].split()[0])
        elif line and not line.startswith((" ", "#")):
            current = None
    return out


@pytest.mark.parametrize("lock", ["requirements.lock", "requirements-dev.lock", "requirements-gpu.lock"])
def test_every_pin_in_the_locks_carries_a_sha256(lock):
    reqs = _requirements(ROOT / lock)
    assert len(reqs) > 50
    unhashed = [name for name, hashes in reqs.items() if not hashes]
    assert not unhashed, f"{lock}: pinned without --hash: {unhashed}"
    assert all(re.fullmatch(r"[0-9a-f]{64}", h) for hashes in reqs.values() for h in hashes)


def test_ci_and_the_readme_install_with_hash_checking():
    install = (
        "pip install --require-hashes -r requirements-dev.lock && "
        "pip install --no-deps --no-build-isolation -e ."
    )
    assert install in (ROOT / "README.md").read_text()
    assert install.replace("pip install", "python -m pip install") in (ROOT / ".ci" / "run").read_text()
    env = (ROOT / "python_env.yaml").read_text()
    assert "-r requirements.lock" in env and "- -e ." in env


# ----------------------------------------------------------------------------- the audit script


class _OSV(BaseHTTPRequestHandler):
    """OSV's /v1/query: `advisories` maps a package name to its vulns; a name in `broken` gets HTTP 500."""

    advisories: dict = {}
    broken: set = set()

    def do_POST(self):  # noqa: N802 - http.server's name
        query = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name = query["package"]["name"]
        self.server.asked.append(name)
        if name in self.broken:
            self.send_response(500)
            self.end_headers()
            return
        body = json.dumps({"vulns": self.advisories[name]} if name in self.advisories else {}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _advisory(package: str, fixed: str) -> dict:
    events = [{"introduced": "0"}, {"fixed": fixed}]
    return {
        "id": "GHSA-tfpp-test-0001",
        "summary": "planted by the test fixture",
        "affected": [
            {
                "package": {"name": package, "ecosystem": "PyPI"},
                "ranges": [{"type": "ECOSYSTEM", "events": events}],
            }
        ],
    }


@pytest.fixture
def osv_server():
    handler = type("Handler", (_OSV,), {"advisories": {}, "broken": set()})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.asked = []
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server, handler
    server.shutdown()
    server.server_close()


def _pip_audit() -> str:
    found = os.environ.get("PIP_AUDIT") or shutil.which("pip-audit")
    if not found:
        pytest.fail(
            "pip-audit is not installed: it is in requirements-dev.lock (pip install pip-audit==2.10.1)"
        )
    return found


def _audit(tmp_path, osv_url: str, lines: str) -> subprocess.CompletedProcess:
    reqs = tmp_path / "requirements.txt"
    reqs.write_text(lines)
    env = {
        **os.environ,
        "PIP_AUDIT": _pip_audit(),
        "PIP_AUDIT_VULNERABILITY_SERVICE": "osv",
        "PIP_AUDIT_OSV_URL": osv_url,
        "PIP_CACHE_DIR": str(tmp_path / "cache"),
    }
    return subprocess.run(
        ["/bin/bash", str(AUDIT), str(reqs)], env=env, capture_output=True, text=True, timeout=300
    )


PINS = "keras==3.15.1\nPyYAML==6.0.3\n"


def _url(server) -> str:
    return f"http://127.0.0.1:{server.server_address[1]}/v1/query"


def test_audit_passes_when_every_package_was_checked_and_none_is_vulnerable(tmp_path, osv_server):
    server, _ = osv_server
    proc = _audit(tmp_path, _url(server), PINS)
    assert proc.returncode == 0, proc.stderr
    assert sorted(server.asked) == ["keras", "pyyaml"]
    assert "2 packages checked, 0 vulnerable, 0 skipped" in proc.stdout


def test_audit_fails_with_1_and_names_a_vulnerable_pin(tmp_path, osv_server):
    server, handler = osv_server
    handler.advisories["keras"] = [_advisory("keras", "99.0")]
    proc = _audit(tmp_path, _url(server), PINS)
    assert proc.returncode == 1, proc.stderr
    assert "VULNERABLE keras==3.15.1: GHSA-tfpp-test-0001 (fixed in: 99.0)" in proc.stdout


def test_audit_is_unchecked_3_when_the_database_errs_for_any_package(tmp_path, osv_server):
    server, handler = osv_server
    handler.broken.add("pyyaml")
    proc = _audit(tmp_path, _url(server), PINS)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "UNCHECKED" in proc.stderr


def test_audit_is_unchecked_3_when_the_database_is_unreachable(tmp_path, osv_server):
    server, _ = osv_server
    url = _url(server)
    server.shutdown()
    server.server_close()  # the port is closed now: every query fails to connect
    proc = _audit(tmp_path, url, PINS)
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "UNCHECKED" in proc.stderr and "audited" in proc.stderr


def test_audit_is_unchecked_3_when_some_packages_could_not_be_audited(tmp_path):
    # pip-audit's report for a partly answered query (the PyPI service skips a package it cannot find): a
    # stand-in pip-audit writes that report, since the real one only skips against pypi.org.
    report = {
        "dependencies": [
            {"name": "keras", "version": "3.15.1", "vulns": []},
            {
                "name": "private-pkg",
                "version": "1.0",
                "skip_reason": "Dependency not found on PyPI and could not be audited",
            },
        ]
    }
    tool = tmp_path / "pip-audit"
    tool.write_text(
        f"#!{sys.executable}\nimport sys, pathlib\nargs = sys.argv\n"
        f"pathlib.Path(args[args.index('-o') + 1]).write_text({json.dumps(json.dumps(report))})\n"
    )
    tool.chmod(0o755)
    reqs = tmp_path / "requirements.txt"
    reqs.write_text("keras==3.15.1\nprivate-pkg==1.0\n")
    env = {**os.environ, "PIP_AUDIT": str(tool)}
    proc = subprocess.run(
        ["/bin/bash", str(AUDIT), str(reqs)], env=env, capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 3, proc.stdout + proc.stderr
    assert "could not be audited: private-pkg" in proc.stderr
