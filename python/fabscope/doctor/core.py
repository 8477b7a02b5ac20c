# SPDX-License-Identifier: BSD-3-Clause
"""The doctor's building blocks: findings, the check registry, the context, the runner.

A *check* is a function ``(ctx) -> list[Finding]`` registered with :func:`check`.  Each
finding says what was seen (evidence: the file or command and the value read), why it
matters, and the exact fix.  A check never raises for a host condition; an unexpected
exception inside a check becomes an ``error`` finding naming the check, so one broken
check cannot hide the others.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal

from fabscope.devices import Inventory, discover, table
from fabscope.errors import EXIT_DOCTOR_ERROR, EXIT_OK, EXIT_WARN
from fabscope.errors import EXIT_USAGE as EXIT_USAGE
from fabscope.inventory import EngineInventory
from fabscope.inventory import from_env_or_query as inventory_from_env_or_query

SCHEMA = "fabscope.doctor/1"

Severity = Literal["ok", "info", "warn", "error"]
SEVERITIES: tuple[Severity, ...] = ("ok", "info", "warn", "error")
_RANK = {s: i for i, s in enumerate(SEVERITIES)}

# Exit status of `fabscope doctor`, from the worst finding.  ok and info are healthy (0);
# a warning is 1 so scripts can tell "works, but slower than it should" from a failure;
# an error is 7.  2 stays what it is for every fabscope command (a usage error), and 3-6 keep
# their run meanings, so a finding can never be mistaken for either.
EXIT_CODES: dict[Severity, int] = {"ok": EXIT_OK, "info": EXIT_OK, "warn": EXIT_WARN, "error": EXIT_DOCTOR_ERROR}


@dataclass
class Finding:
    id: str
    severity: Severity
    title: str
    evidence: str
    why: str = ""
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


@dataclass
class CommandResult:
    argv: list[str]
    returncode: int | None
    stdout: str
    stderr: str
    error: str | None = None  # "not installed", "timed out after 10 s", ...

    @property
    def ok(self) -> bool:
        return self.error is None and self.returncode == 0

    def describe(self) -> str:
        cmd = " ".join(self.argv)
        if self.error:
            return f"`{cmd}`: {self.error}"
        return f"`{cmd}` exited {self.returncode}"


class CommandRunner:
    """Runs the external tools the doctor consults, with a deadline on each.

    ``overrides`` maps a tool name (``nft``) to the path of another executable; tests use
    it only for tools that cannot run here (a firewall rule set needs privileges and
    kernel state).  Results are cached per command line and environment, because several
    checks read the same ``ompi_info`` output.  (UCX and libfabric are not asked through
    their tools' text: the engine's inventory, :attr:`Context.engine_inventory`, lists them.)
    """

    def __init__(self, overrides: Mapping[str, str] | None = None, timeout: float = 20.0) -> None:
        self.overrides = dict(overrides or {})
        self.timeout = timeout
        self._cache: dict[tuple[tuple[str, ...], tuple[tuple[str, str], ...]], CommandResult] = {}

    def which(self, tool: str) -> str | None:
        if tool in self.overrides:
            return self.overrides[tool]
        return shutil.which(tool)

    def run(self, argv: list[str], env: Mapping[str, str] | None = None) -> CommandResult:
        env_items = tuple(sorted((env or {}).items()))
        key = (tuple(argv), env_items)
        if key in self._cache:
            return self._cache[key]
        exe = self.which(argv[0])
        if exe is None:
            res = CommandResult(argv, None, "", "", error="not installed (not found in PATH)")
        else:
            try:
                proc = subprocess.run(
                    [exe, *argv[1:]], capture_output=True, text=True, timeout=self.timeout,
                    env=dict(env) if env is not None else None, check=False,
                )
                res = CommandResult(argv, proc.returncode, proc.stdout, proc.stderr)
            except subprocess.TimeoutExpired:
                res = CommandResult(argv, None, "", "", error=f"timed out after {self.timeout:g} s")
            except OSError as exc:
                res = CommandResult(argv, None, "", "", error=f"could not run: {exc.strerror}")
        self._cache[key] = res
        return res


@dataclass
class Context:
    """Everything a check may look at.  All roots are parameters so tests can use copies
    of real layouts; the defaults are the live machine."""

    sysfs_root: Path = Path("/sys")
    proc_root: Path = Path("/proc")
    etc_root: Path = Path("/etc")
    dev_root: Path = Path("/dev")
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    runner: CommandRunner = field(default_factory=CommandRunner)
    # What the libraries offer (the engine's --inventory-json); None = ask this host's engine
    # (or read $FABSCOPE_INVENTORY).  Tests pass the inventory that belongs to their sysfs copy.
    engine_inventory_override: EngineInventory | None = None
    # The link layer the user expects on every RDMA port ("InfiniBand"/"Ethernet"), if any.
    expected_link_layer: str | None = None
    # The device the user will ask for (`doctor --device`): RDMA settings are checked against it;
    # None = against every RDMA device here.
    device: str | None = None
    # CPUs this process may run on; None = os.sched_getaffinity(0) of the real process.
    cpu_affinity: set[int] | None = None

    @property
    def live(self) -> bool:
        return os.path.realpath(self.sysfs_root) == "/sys"

    @cached_property
    def engine_inventory(self) -> EngineInventory:
        if self.engine_inventory_override is not None:
            return self.engine_inventory_override
        return inventory_from_env_or_query(self.env)

    @property
    def inventory_describes_sysfs(self) -> bool:
        """The verbs part is of the host whose sysfs we read: the live host, or an inventory
        given with (or for) the sysfs copy."""
        return (self.live or self.engine_inventory_override is not None
                or bool(self.env.get("FABSCOPE_INVENTORY")))

    @cached_property
    def inventory(self) -> Inventory:
        verbs = self.engine_inventory.verbs if self.inventory_describes_sysfs else None
        return discover(self.sysfs_root, verbs)

    def sys(self, rel: str) -> Path:
        return self.sysfs_root / rel

    def proc(self, rel: str) -> Path:
        return self.proc_root / rel

    def etc(self, rel: str) -> Path:
        return self.etc_root / rel


CheckFn = Callable[[Context], list[Finding]]


@dataclass
class Check:
    name: str
    area: str
    doc: str
    fn: CheckFn


CHECKS: dict[str, Check] = {}
# Report order: the fabric first, then the host, then the middleware.
AREA_ORDER = ["rdma", "ports", "gid", "memlock", "cpu", "net", "firewall", "ucx", "openmpi", "ofi"]


def check(name: str, area: str) -> Callable[[CheckFn], CheckFn]:
    """Register a check under ``name`` (the prefix of its finding ids)."""

    def deco(fn: CheckFn) -> CheckFn:
        if name in CHECKS:
            raise ValueError(f"doctor check {name!r} registered twice")
        CHECKS[name] = Check(name=name, area=area, doc=(fn.__doc__ or "").strip(), fn=fn)
        return fn

    return deco


@dataclass
class Report:
    findings: list[Finding]
    host: str

    @property
    def worst(self) -> Severity:
        worst: Severity = "ok"
        for f in self.findings:
            if _RANK[f.severity] > _RANK[worst]:
                worst = f.severity
        return worst

    @property
    def exit_code(self) -> int:
        return EXIT_CODES[self.worst]

    def counts(self) -> dict[str, int]:
        return {s: sum(1 for f in self.findings if f.severity == s) for s in SEVERITIES}

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "host": self.host,
            "worst": self.worst,
            "exit_code": self.exit_code,
            "counts": self.counts(),
            "findings": [f.to_dict() for f in self.findings],
        }

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2)


def run_checks(ctx: Context, names: list[str] | None = None) -> list[Finding]:
    findings: list[Finding] = []
    order = {a: i for i, a in enumerate(AREA_ORDER)}
    for name, chk in sorted(CHECKS.items(), key=lambda kv: order.get(kv[1].area, len(order))):
        if names is not None and name not in names:
            continue
        try:
            findings.extend(chk.fn(ctx))
        except Exception as exc:
            findings.append(Finding(
                id=f"{name}.internal", severity="error",
                title=f"check {name} failed inside fabscope",
                evidence=f"{type(exc).__name__}: {exc}",
                why="this is a fabscope bug; the other checks still ran",
                fix="report it with the output of `fabscope doctor --json`",
            ))
    return findings


def render_text(report: Report) -> str:
    rows = [[f.severity.upper(), f.id, f.title] for f in report.findings]
    out = [f"fabscope doctor on {report.host}", table(["severity", "id", "finding"], rows), ""]
    for f in report.findings:
        if f.severity in ("ok",):
            continue
        out.append(f"[{f.severity.upper()}] {f.id}: {f.title}")
        out.append(f"  seen: {f.evidence}")
        if f.why:
            out.append(f"  why:  {f.why}")
        if f.fix:
            out.append(f"  fix:  {f.fix}")
        out.append("")
    c = report.counts()
    out.append(f"{c['error']} error(s), {c['warn']} warning(s), {c['info']} note(s), "
               f"{c['ok']} ok; exit status {report.exit_code}")
    return "\n".join(out) + "\n"
