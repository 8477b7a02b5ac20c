# SPDX-License-Identifier: BSD-3-Clause
"""Writes fabscope-VERSION.dist-info beside the installed package (debian/rules): what pip list and
importlib.metadata read. The version is the package's one version (python/fabscope/__init__.py)."""

import sys
from pathlib import Path

site, version = Path(sys.argv[1]), sys.argv[2]
package = (site / "fabscope" / "__init__.py").read_text()
if f'__version__ = "{version}"' not in package:
    sys.exit(f"dist-info.py: debian/changelog says {version}, python/fabscope/__init__.py does not: one version")
info = site / f"fabscope-{version}.dist-info"
info.mkdir()
(info / "METADATA").write_text(
    f"Metadata-Version: 2.1\nName: fabscope\nVersion: {version}\n"
    "Summary: Measure and diagnose high-speed networks: RDMA, UCX, libfabric, MPI and TCP, with one methodology\n"
    "Requires-Python: >=3.11\n"
)
(info / "INSTALLER").write_text("dpkg\n")
(info / "top_level.txt").write_text("fabscope\n")
(info / "entry_points.txt").write_text("[console_scripts]\nfabscope = fabscope.cli:main\n")
