# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope health`: the quick per-node pass a scheduler runs (Slurm HealthCheckProgram, prolog,
epilog), within seconds: the doctor's checks, each port's state, speed and MTU against a baseline's
(`--baseline NAME`, the ports of the host that saved it), error counters that moved since the last
health check (remembered in a state file), a short verbs loopback test of each RDMA device with an
ACTIVE port, and the judgements of `fabscope check` (pass / warn /
fail / inconclusive, fault codes, evidence, fix).

`--drain` sets this node to DRAIN through `scontrol` when something failed, with the fault code and
one line of evidence as the reason (prefixed ``fabscope``); an inconclusive or unreadable check
never drains. `--undrain` returns the node when everything passes, and only when fabscope drained
it (the reason starts with ``fabscope``): a node drained by someone else is never touched.

Exit status: 0 healthy (warnings allowed), 10 inconclusive, 11 unhealthy, 2 bad usage."""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from ..errors import EXIT_CHECK_FAILED, EXIT_INCONCLUSIVE, EXIT_OK, EXIT_USAGE, FabscopeError
from . import baseline as baselines
from .check import STATUS_ORDER, Judgement
from .faults import fault

# How long a health result holds: a scheduler runs it every few minutes.
VALID_FOR = timedelta(minutes=15)
# scontrol answers within a second on a live controller; a dead one must not hang the check.
SCONTROL_DEADLINE_S = 10.0
DRAIN_PREFIX = "fabscope"
# Counters whose growth is an error (names as sysfs spells them, netdev and RDMA ports).
_ERROR_PARTS = ("error", "discard", "link_downed", "carrier", "crc", "symbol")
_FACT_CODE = {"state": "FS-LINK-002", "mtu": "FS-MTU-001", "speed_mbps": "FS-SPEED-001", "rate_gbps": "FS-SPEED-001"}


def default_state_path() -> Path:
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "fabscope" / "health-state.json"


def _node(ns: argparse.Namespace) -> str:
    return str(ns.node or os.environ.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0])


def _j(case: str, expectation: str, status: str, code: str | None, evidence: str, node: str) -> Judgement:
    return Judgement("health", case, expectation, status, code, None, None, evidence,
                     fault(code).fix if code and status != "pass" else "", (node,))


def _doctor(node: str) -> list[Judgement]:
    from ..devices import sysfs_root_from_env
    from ..doctor import Context, run_doctor

    report = run_doctor(Context(sysfs_root=sysfs_root_from_env(None)))
    errors = [f for f in report.findings if f.severity == "error"]
    if not errors:
        return [_j("doctor", "no doctor errors", "pass", None, f"{len(report.findings)} finding(s), no error", node)]
    return [_j("doctor", "no doctor errors", "fail", "FS-DOC-001", f"{f.id}: {f.title} ({f.evidence})", node)
            for f in errors]


def _ports(node: str, expected: dict[str, str]) -> list[Judgement]:
    now = baselines.port_facts()
    out = []
    names = sorted({k.rsplit(".", 1)[0] for k in expected if k.startswith("port.")})
    for name in names:
        port = name.removeprefix("port.")
        if not any(k.startswith(name + ".") for k in now):
            out.append(_j(f"port {port}", "present", "fail", "FS-PORT-001",
                          f"{port} is in the baseline but not on this node", node))
            continue
        for key in sorted(k for k in expected if k.startswith(name + ".")):
            fact = key.rsplit(".", 1)[1]
            want, got = expected[key], now.get(key)
            said = f"{port} {fact} {got} (baseline {want})"
            if got == want:
                out.append(_j(f"port {port}", f"{fact} as in the baseline", "pass", None, said, node))
            elif got in (None, "None"):
                out.append(_j(f"port {port}", f"{fact} as in the baseline", "inconclusive", "FS-STAT-001",
                              f"{port} {fact} unreadable (baseline {want})", node))
            else:
                code = _FACT_CODE.get(fact, "FS-FIG-001")
                if fact == "state" and got != "up" and want == "up":
                    said = f"{port} is {got}, not up (baseline up)"
                out.append(_j(f"port {port}", f"{fact} as in the baseline", "fail", code, said, node))
    return out


# The loopback test of each RDMA device: small and short (a scheduler waits for it).
RDMA_LOOPBACK = ("--backend", "verbs", "--op", "send", "--pattern", "lat", "--sizes", "8", "--iters", "200",
                 "--timeout", "5")
RDMA_LOOPBACK_DEADLINE_S = 8.0


def _rdma_loopback(node: str) -> list[Judgement]:
    """A short verbs ping-pong on each RDMA device with an ACTIVE port, both ends on this node."""
    from ..devices import discover

    out = []
    for dev in discover().rdma_devices:
        if not any(p.state and "ACTIVE" in p.state.upper() for p in dev.ports):
            continue  # a port that is not up is the ports' judgement (against the baseline), not this one
        argv = [sys.executable, "-m", "fabscope", "run", "--loopback", "--device", dev.name, *RDMA_LOOPBACK,
                "--no-store", "--format", "json"]
        try:
            got = subprocess.run(argv, capture_output=True, text=True, timeout=RDMA_LOOPBACK_DEADLINE_S)
        except subprocess.TimeoutExpired:
            out.append(_j(f"rdma {dev.name}", "verbs loopback answers", "fail", "FS-RDMA-001",
                          f"{dev.name}: no answer within {RDMA_LOOPBACK_DEADLINE_S:g} s", node))
            continue
        p50 = next((json.loads(ln).get("latency_us", {}).get("p50") for ln in got.stdout.splitlines()
                    if ln.startswith("{")), None)
        if got.returncode == 0 and p50 is not None:
            out.append(_j(f"rdma {dev.name}", "verbs loopback answers", "pass", None,
                          f"{dev.name}: 8 B send ping-pong p50 {p50:.3g} us", node))
        elif got.returncode == 6:  # unsupported: a valid request this device cannot do
            out.append(_j(f"rdma {dev.name}", "verbs loopback answers", "inconclusive", "FS-STAT-001",
                          f"{dev.name}: {(got.stderr.strip().splitlines() or ['unsupported'])[-1]}", node))
        else:
            said = (got.stderr.strip().splitlines() or [f"exit {got.returncode}"])[-1]
            out.append(_j(f"rdma {dev.name}", "verbs loopback answers", "fail", "FS-RDMA-001",
                          f"{dev.name}: {said}", node))
    return out


def _error_counters() -> dict[str, int]:
    """Every error counter of every port, from the engine's counter dump (its one reader)."""
    from ..launch.engine import engine_path

    proc = subprocess.run([str(engine_path()), "--counters-json"], capture_output=True, text=True, timeout=10)
    if proc.returncode != 0:
        raise FabscopeError(f"the engine's counter dump failed: {proc.stderr.strip()[:200]}", 4)
    dump = json.loads(proc.stdout)
    out: dict[str, int] = {}
    for n in dump.get("net", []):
        for k, v in (n.get("statistics") or {}).items():
            if isinstance(v, int) and any(part in k for part in _ERROR_PARTS):
                out[f"{n.get('name')}:{k}"] = v
    for p in dump.get("rdma", []):
        for group in ("counters", "hw_counters"):
            for k, v in (p.get(group) or {}).items():
                if isinstance(v, int) and any(part in k for part in _ERROR_PARTS):
                    out[f"{p.get('device')}/{p.get('port')}:{k}"] = v
    return out


def _counters(node: str, state_path: Path) -> list[Judgement]:
    try:
        now = _error_counters()
    except (OSError, ValueError, subprocess.TimeoutExpired, FabscopeError) as exc:
        return [_j("counters", "error counters still", "inconclusive", "FS-STAT-001",
                   f"the counters could not be read: {exc}", node)]
    try:
        before = json.loads(state_path.read_text()).get("counters", {})
    except (OSError, ValueError):
        before = None
    try:
        state_path.parent.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps({"at": datetime.now(UTC).isoformat(timespec="seconds"), "counters": now}))
    except OSError as exc:
        return [_j("counters", "error counters still", "inconclusive", "FS-STAT-001",
                   f"the state file {state_path} cannot be written ({exc.strerror}); give --state PATH", node)]
    if before is None:
        return [_j("counters", "error counters still", "pass", None,
                   f"first health check here: {len(now)} error counters remembered in {state_path}", node)]
    moved = {k: v - int(before[k]) for k, v in now.items() if k in before and v > int(before[k])}
    if not moved:
        return [_j("counters", "error counters still", "pass", None, f"{len(now)} error counters, none moved", node)]
    shown = ", ".join(f"{k} +{d}" for k, d in sorted(moved.items())[:5])
    return [_j("counters", "error counters still", "warn", "FS-CNT-001", f"moved since the last check: {shown}", node)]


def judge(ns: argparse.Namespace) -> list[Judgement]:
    node = _node(ns)
    out = _doctor(node)
    if ns.baseline:
        from ..store import open_store

        with open_store(ns.store, readonly=True) as store:
            base = baselines.find(store, ns.baseline)
        out += _ports(node, base["fingerprint"])
    out += _counters(node, Path(ns.state) if ns.state else default_state_path())
    out += _rdma_loopback(node)
    made = datetime.now(UTC)
    for j in out:
        j.made_at = made.isoformat(timespec="seconds")
        j.valid_until = (made + VALID_FOR).isoformat(timespec="seconds")
    return out


def _scontrol(argv: list[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(["scontrol", *argv], capture_output=True, text=True, timeout=SCONTROL_DEADLINE_S)
    except FileNotFoundError as exc:
        raise FabscopeError("--drain/--undrain need scontrol (Slurm's client) on PATH; it is not there",
                            EXIT_USAGE) from exc
    except subprocess.TimeoutExpired as exc:
        raise FabscopeError(f"scontrol did not answer within {SCONTROL_DEADLINE_S:g} s (is slurmctld up? "
                            "SLURM_CONF?)", EXIT_INCONCLUSIVE) from exc


def node_reason(node: str) -> tuple[str, str]:
    """(state, reason) of a node as scontrol shows it."""
    got = _scontrol(["show", "node", node, "--oneliner"])
    if got.returncode != 0:
        raise FabscopeError(f"scontrol show node {node}: {got.stderr.strip()} (--node NAME names this node)",
                            EXIT_USAGE)
    fields = dict(part.split("=", 1) for part in got.stdout.split(" ") if "=" in part)
    reason = got.stdout.split("Reason=", 1)[1].strip() if "Reason=" in got.stdout else ""
    return fields.get("State", ""), reason


def _act(ns: argparse.Namespace, status: str, out: list[Judgement]) -> str | None:
    node = _node(ns)
    if ns.drain and status == "fail":
        first = next(j for j in out if j.status == "fail")
        reason = f"{DRAIN_PREFIX} {first.code}: {first.evidence}"[:200].replace("\n", " ")
        got = _scontrol(["update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}"])
        if got.returncode != 0:
            raise FabscopeError(f"scontrol could not drain {node}: {got.stderr.strip()}", EXIT_CHECK_FAILED)
        return f"drained {node}: {reason}"
    if ns.undrain and status in ("pass", "warn"):
        state, reason = node_reason(node)
        if "DRAIN" not in state:
            return None
        if not reason.startswith(DRAIN_PREFIX):
            return f"{node} is drained by someone else ({reason or 'no reason'}): left as it is"
        got = _scontrol(["update", f"NodeName={node}", "State=RESUME"])
        if got.returncode != 0:
            raise FabscopeError(f"scontrol could not resume {node}: {got.stderr.strip()}", EXIT_CHECK_FAILED)
        return f"returned {node} to service (fabscope had drained it: {reason})"
    return None


def health_main(ns: argparse.Namespace) -> int:
    out = judge(ns)
    worst = STATUS_ORDER[max((STATUS_ORDER.index(j.status) for j in out), default=0)]
    action = _act(ns, worst, out)
    from .status import record

    record(out, "health", _node(ns))
    if ns.format == "json":
        from dataclasses import asdict

        doc: dict[str, Any] = {"schema": "fabscope.health/1", "node": _node(ns), "status": worst,
                               "action": action, "judgements": [asdict(j) for j in out]}
        sys.stdout.write(json.dumps(doc) + "\n")
    else:
        for j in out:
            if j.status != "pass":
                print(f"{j.status.upper() if j.status == 'fail' else j.status}\t{j.code}\t{j.case}\t{j.evidence}"
                      + (f"\tfix: {j.fix}" if j.fix else ""))
        print(f"# {_node(ns)}: {worst} ({len(out)} judgement(s))" + (f"; {action}" if action else ""))
    return {"pass": EXIT_OK, "warn": EXIT_OK, "inconclusive": EXIT_INCONCLUSIVE, "fail": EXIT_CHECK_FAILED}[worst]


def fill_health_parser(p: argparse.ArgumentParser) -> None:
    """`fabscope health` (cli.py names the subcommand)."""
    from .. import argtypes

    p.add_argument("--format", choices=["text", "json"], default="text")
    p.add_argument("--baseline", type=argtypes.text(200), default=None, metavar="NAME",
                   help="judge each port's state, speed and MTU against this baseline's")
    p.add_argument("--store", metavar="PATH", default=None, help="the history file holding the baseline")
    p.add_argument("--state", metavar="PATH", default=None,
                   help=f"where the error counters are remembered between checks (default {default_state_path()})")
    p.add_argument("--node", type=argtypes.text(200), default=None,
                   help="this node's Slurm name (default $SLURMD_NODENAME, else the short host name)")
    act = p.add_mutually_exclusive_group()
    act.add_argument("--drain", action="store_true",
                     help="on a failure, set this node to DRAIN (scontrol) with the fault code as the reason")
    act.add_argument("--undrain", action="store_true",
                     help="when healthy, return this node to service if fabscope drained it")
    p.set_defaults(func=health_main)
