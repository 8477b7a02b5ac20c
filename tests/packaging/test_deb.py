"""The .deb installed into a clean Debian root (debootstrap minbase, cached; a throw-away overlay per
run) and used there without the checkout: --version, a loopback run, doctor, the man pages, the
completion, the serve unit (installed, not enabled) and the Grafana/Prometheus files.

The package is $FABSCOPE_DEB when set (scripts/test.sh builds it once with `make deb`, lintian
included), otherwise built here into a temporary directory by scripts/build-deb.sh."""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from fabscope import __version__
from fabscope.testbed import debroot

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (debootstrap, chroot, mounts)"),
]


@pytest.fixture(scope="module")
def deb(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    given = os.environ.get("FABSCOPE_DEB")
    if given:
        yield Path(given)
        return
    out = tmp_path_factory.mktemp("deb")
    proc = subprocess.run(["bash", str(REPO / "scripts/build-deb.sh")], capture_output=True, text=True, timeout=900,
                          env=dict(os.environ, FABSCOPE_DEB_DIR=str(out)), check=False)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    yield Path(proc.stdout.strip().splitlines()[-1])


def _depends(deb: Path) -> list[str]:
    """The package names of the .deb's Depends (first of each alternative), to pre-install in the root."""
    field = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, check=True,
                           timeout=30).stdout
    return [re.split(r"[\s(:]", alt.split("|")[0].strip())[0] for alt in field.split(",") if alt.strip()]


SCRIPT = r"""
apt-get install -y --no-install-recommends /tmp/in/{deb} > /tmp/apt.log 2>&1 || {{ cat /tmp/apt.log; exit 1; }}
echo "=== where"; python3 -c 'import fabscope; print(fabscope.__file__)'; command -v fabscope
test ! -e /work/main
echo "=== version"; fabscope --version
echo "=== run"; fabscope run --loopback --sizes 8 --iters 200 --warmup 10 --format json
echo "=== doctor"; rc=0; fabscope doctor --json > /tmp/doctor.json || rc=$?; echo "doctor-exit=$rc"
python3 -c 'import json; print(json.load(open("/tmp/doctor.json"))["schema"])'
echo "=== man"; MANWIDTH=80 man fabscope 2>&1 | head -3; man -w fabscope-run fabscope-engine
echo "=== files"
ls /usr/share/bash-completion/completions/fabscope /usr/share/fabscope/grafana/fabscope.json \
   /usr/share/fabscope/prometheus/fabscope-alerts.yml /etc/fabscope/serve.env /lib/systemd/system/fabscope-serve.service
grep '^ExecStart=/usr/bin/fabscope serve' /lib/systemd/system/fabscope-serve.service
if ls /etc/systemd/system/*.wants/fabscope-serve.service 2>/dev/null; then echo "serve-enabled"; fi
echo "=== end"
"""


def test_deb_installs_and_runs_in_a_clean_debian_root(deb: Path) -> None:
    assert deb.name.startswith(f"fabscope_{__version__}_"), deb.name
    root = debroot.build([*_depends(deb), "man-db"])
    proc = debroot.run_in_copy(root, SCRIPT.format(deb=deb.name), files=[deb], timeout_s=300)
    out = proc.stdout
    assert proc.returncode == 0, out[-4000:] + proc.stderr[-4000:]
    sections = dict(re.findall(r"=== (\w+)\n(.*?)(?==== |\Z)", out, re.S))
    assert sections["where"].split() == ["/usr/lib/python3/dist-packages/fabscope/__init__.py", "/usr/bin/fabscope"]
    version = sections["version"]
    assert version.startswith(f"fabscope {__version__}\n"), version
    assert f"engine: /usr/bin/fabscope-engine (version {__version__})" in version
    assert re.search(r"backends built: tcp\b", version), version
    records = [json.loads(line) for line in sections["run"].splitlines() if line.startswith("{")]
    assert records and all(r["version"] == __version__ and r["backend"] == "tcp" for r in records), sections["run"]
    doctor = sections["doctor"]
    assert "doctor-exit=2" not in doctor and "Traceback" not in proc.stderr, doctor + proc.stderr
    assert doctor.strip().endswith("fabscope.doctor/1") or "fabscope.doctor" in doctor, doctor
    man = sections["man"]
    assert "FABSCOPE(1)" in man and "/usr/share/man/man1/fabscope-run.1.gz" in man, man
    assert "grep" not in sections["files"] and "serve-enabled" not in out, sections["files"]
