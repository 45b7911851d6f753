#!/usr/bin/env bash
# Dependency audit: known vulnerabilities (PyPI advisory data) in the pinned environment, with pip-audit.
#
#   scripts/audit_deps.sh [REQUIREMENTS]        # default: requirements.lock
#
# Exit codes: 0 every package checked, no known vulnerability; 1 vulnerabilities found (listed),
#             2 pip-audit failed otherwise, 3 UNCHECKED: the vulnerability database could not be reached or
#             answered with an error, or ANY package could not be audited (named): the audit is incomplete,
#             4 pip-audit is not installed (pip install pip-audit==2.10.1, or set PIP_AUDIT=/path/to/pip-audit).
# Every package is pinned with ==, so pip-audit checks the pins as listed (--no-deps --disable-pip) and
# installs nothing. Set PIP_AUDIT_ARGS for extra flags (e.g. "--ignore-vuln GHSA-xxxx" with a reason in git).
# Another advisory source (a mirror; the tests' local fixture): PIP_AUDIT_VULNERABILITY_SERVICE=osv and
# PIP_AUDIT_OSV_URL=https://mirror/v1/query, which pip-audit reads itself.
set -uo pipefail

here="${BASH_SOURCE[0]%/*}"
[ "$here" = "${BASH_SOURCE[0]}" ] && here=.
cd "$here/.." || exit 2
REQS="${1:-requirements.lock}"
if [ ! -f "$REQS" ]; then
    echo "audit: $REQS: requirements file not found" >&2
    exit 2
fi

if [ -n "${PIP_AUDIT:-}" ]; then
    read -r -a AUDIT <<< "$PIP_AUDIT"
elif command -v pip-audit >/dev/null 2>&1; then
    AUDIT=(pip-audit)
elif python3 -c "import pip_audit" >/dev/null 2>&1; then
    AUDIT=(python3 -m pip_audit)
else
    echo "audit: pip-audit is not installed; install it with 'pip install pip-audit==2.10.1' (or set PIP_AUDIT=/path/to/pip-audit)" >&2
    exit 4
fi

tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2086
"${AUDIT[@]}" -r "$REQS" --no-deps --disable-pip --progress-spinner off -f json -o "$tmp/report.json" \
    ${PIP_AUDIT_ARGS:-} >"$tmp/stdout" 2>"$tmp/stderr"
rc=$?

python3 - "$tmp" "$rc" "$REQS" <<'PY'
import json, re, sys
from pathlib import Path

tmp, rc, reqs = Path(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
stderr = (tmp / "stderr").read_text(errors="replace")
network = re.search(r"ConnectionError|NameResolutionError|Max retries exceeded|Connection refused|"
                    r"Temporary failure in name resolution|timed out|ProxyError|SSLError|ServiceError|HTTPError",
                    stderr)
report_file = tmp / "report.json"
if not report_file.is_file() or not report_file.read_text().strip():
    if network:
        print(f"audit: UNCHECKED: the vulnerability database is unreachable or failed ({network.group(0)}); "
              f"nothing in {reqs} was audited. Run this with network access to PyPI.", file=sys.stderr)
        sys.exit(3)
    last = [l for l in stderr.splitlines() if l.strip()][-1:] or ["no output"]
    print(f"audit: pip-audit failed (exit {rc}): {last[0]}", file=sys.stderr)
    sys.exit(2)

report = json.loads(report_file.read_text())
deps = report.get("dependencies", [])
skipped = [d for d in deps if d.get("skip_reason")]
unreachable = [d for d in skipped if "could not be audited" in d["skip_reason"] or "not found" in d["skip_reason"]]
audited = [d for d in deps if not d.get("skip_reason")]
vulnerable = [d for d in audited if d.get("vulns")]
if deps and not audited:
    print(f"audit: UNCHECKED: the vulnerability database did not answer for any of the {len(deps)} packages in "
          f"{reqs} ('{unreachable[0]['skip_reason'] if unreachable else skipped[0]['skip_reason']}'); "
          "offline or PyPI's JSON API is blocked. Nothing was audited.", file=sys.stderr)
    sys.exit(3)
for d in vulnerable:
    for v in d["vulns"]:
        fixes = ", ".join(v.get("fix_versions") or []) or "no fix yet"
        print(f"VULNERABLE {d['name']}=={d['version']}: {v['id']} (fixed in: {fixes}) {', '.join(v.get('aliases') or [])}")
for d in skipped:
    print(f"skipped {d['name']}: {d['skip_reason']}", file=sys.stderr)
print(f"audit: {len(audited)} packages checked, {len(vulnerable)} vulnerable, {len(skipped)} skipped ({reqs})")
if vulnerable:
    sys.exit(1)
if skipped:  # an incomplete audit must not pass as a clean one
    print(f"audit: UNCHECKED: {len(skipped)} package(s) could not be audited: "
          f"{', '.join(d['name'] for d in skipped)}", file=sys.stderr)
    sys.exit(3)
sys.exit(0)
PY
