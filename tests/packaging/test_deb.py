# SPDX-License-Identifier: BSD-3-Clause
"""The .deb installed into a clean Debian root (debootstrap minbase, cached; a throw-away overlay per
run) and used there without the checkout: --version, a loopback run, doctor, the man pages, the
completion, the serve unit (installed, not enabled) and the Grafana/Prometheus files.

The package is the session's one build (the `deb` fixture in tests/conftest.py: $FABSCOPE_DEB, or built once)."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from fabscope import __version__
from fabscope.doctor import EXIT_CODES, SCHEMA
from fabscope.testbed import debroot

REPO = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.packaging,
    pytest.mark.two_at_once,
    pytest.mark.xdist_group("build"),
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (debootstrap, chroot, mounts)"),
]


def _depends(deb: Path) -> list[str]:
    """The package names of the .deb's Depends (first of each alternative), to pre-install in the root."""
    field = subprocess.run(["dpkg-deb", "-f", str(deb), "Depends"], capture_output=True, text=True, check=True,
                           timeout=30).stdout
    return [re.split(r"[\s(:]", alt.split("|")[0].strip())[0] for alt in field.split(",") if alt.strip()]


SCRIPT = r"""
apt-get install -y --no-install-recommends /tmp/in/{deb} > /tmp/apt.log 2>&1 || {{ cat /tmp/apt.log; exit 1; }}
echo "=== where"; python3 -c 'import fabscope; print(fabscope.__file__)'; command -v fabscope
test ! -e {repo}
echo "=== version"; fabscope --version
echo "=== run"; fabscope run --loopback --sizes 8 --iters 200 --warmup 10 --format json
echo "=== doctor"; rc=0; fabscope doctor --json > /tmp/doctor.json || rc=$?; echo "doctor-exit=$rc"
python3 -c 'import json; print(json.load(open("/tmp/doctor.json"))["schema"])'
echo "=== man"; MANWIDTH=80 man fabscope 2>&1 | head -3; man -w fabscope-run fabscope-engine
echo "=== files"
ls /usr/share/bash-completion/completions/fabscope /usr/share/zsh/vendor-completions/_fabscope \
   /usr/share/fish/vendor_completions.d/fabscope.fish /usr/share/fabscope/grafana/fabscope.json \
   /usr/share/fabscope/prometheus/fabscope-alerts.yml /etc/fabscope/serve.env /lib/systemd/system/fabscope-serve.service
grep '^ExecStart=/usr/bin/fabscope serve' /lib/systemd/system/fabscope-serve.service
if ls /etc/systemd/system/*.wants/fabscope-serve.service 2>/dev/null; then echo "serve-enabled"; fi
echo "=== completion"
bash -c '. /usr/share/bash-completion/completions/fabscope; COMP_WORDS=(fabscope testbed ne); COMP_CWORD=2; _fabscope
         echo "${{COMPREPLY[*]}}"'
echo "=== end"
"""


def test_deb_installs_and_runs_in_a_clean_debian_root(deb: Path) -> None:
    assert deb.name.startswith(f"fabscope_{__version__}_"), deb.name
    root = debroot.build([*_depends(deb), "man-db"])
    proc = debroot.run_in_copy(root, SCRIPT.format(deb=deb.name, repo=REPO), files=[deb], timeout_s=300)
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
    # Doctor's own verdict on the clean root (0 ok, 1 warnings, 7 errors: doctor.EXIT_CODES), never
    # usage (2) or a crash; and the JSON it wrote carries its schema, nothing else on that line.
    doctor_exit, schema = doctor.split()
    assert doctor_exit in {f"doctor-exit={code}" for code in EXIT_CODES.values()}, doctor + proc.stderr
    assert schema == SCHEMA and "Traceback" not in proc.stderr, doctor + proc.stderr
    man = sections["man"]
    assert "FABSCOPE(1)" in man and "/usr/share/man/man1/fabscope-run.1.gz" in man, man
    assert "grep" not in sections["files"] and "serve-enabled" not in out, sections["files"]
    assert sections["completion"].split() == ["netns"], sections["completion"]


def test_deb_depends_on_runtime_libraries_only(deb: Path) -> None:
    """Depends: the runtime libraries and python3, nothing from the build toolchain; the MPI engines'
    libraries are Recommends; the package's version is the one version."""
    def field(name: str) -> str:
        return subprocess.run(["dpkg-deb", "-f", str(deb), name], capture_output=True, text=True, check=True,
                              timeout=30).stdout.strip()

    assert field("Version") == __version__
    depends = set(_depends(deb))
    assert {"libcjson1", "libibverbs1", "librdmacm1", "libucx0", "libfabric1", "python3"} <= depends, depends
    toolchain = {"cmake", "ninja-build", "pkg-config", "gcc", "cc", "make", "debhelper", "dh-python"}
    assert not depends & toolchain and not [d for d in depends if d.endswith("-dev")], depends
    recommends = field("Recommends")
    assert "libopenmpi3" in recommends and "libmpich12" in recommends, recommends
    assert not {"libopenmpi3", "libmpich12"} & depends, depends
    contents = subprocess.run(["dpkg-deb", "-c", str(deb)], capture_output=True, text=True, check=True,
                              timeout=30).stdout
    for engine in ("fabscope-engine", "fabscope-engine-mpi-openmpi", "fabscope-engine-mpi-mpich"):
        assert f"./usr/bin/{engine}\n" in contents, engine
