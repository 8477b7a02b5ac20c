# SPDX-License-Identifier: BSD-3-Clause
"""UCX: every name in UCX_TLS and UCX_NET_DEVICES must exist among the transports and devices
UCX itself reports on this host (the engine's inventory, the same list ``--ucx-tls`` and
``--device`` are checked against).  UCX drops names it cannot use with at most a warning, so a
typo means the run silently uses something else (UCX #10049, #4966, #7960)."""

from __future__ import annotations

from fabscope.doctor.core import Context, Finding, Severity, check
from fabscope.inventory import Ucx


def _split(value: str) -> tuple[bool, list[str]]:
    value = value.strip()
    neg = value.startswith("^")
    if neg:
        value = value[1:]
    return neg, [n.strip() for n in value.split(",") if n.strip()]


def accepted(ucx: Ucx) -> tuple[list[str], list[str]]:
    """What ``--ucx-tls`` and ``--device`` (UCX_TLS / UCX_NET_DEVICES) accept on this host."""
    return list(ucx.tls_names), ["all", *ucx.net_devices]


def listing(ucx: Ucx) -> str:
    """The sentence every UCX finding carries as evidence: resources and the accepted names."""
    pairs = ", ".join(f"{r.transport}/{r.device}" for r in ucx.resources) or "none"
    tls, devs = accepted(ucx)
    return (f"UCX {ucx.version or '?'} resources (fabscope-engine --inventory-json): {pairs}; "
            f"--ucx-tls accepts: {', '.join(tls)}; --device accepts: {', '.join(devs)}")


def _tls_name(token: str) -> str:
    # "\\rc" asks for rc without alias expansion, "ud:aux" for auxiliary use only.
    return token.lstrip("\\").split(":", 1)[0]


@check("ucx", "ucx")
def check_ucx(ctx: Context) -> list[Finding]:
    """UCX_TLS and UCX_NET_DEVICES names against the transports and devices UCX offers here."""
    tls_env = ctx.env.get("UCX_TLS")
    dev_env = ctx.env.get("UCX_NET_DEVICES")
    ucx = ctx.engine_inventory.ucx
    if not ucx.ok:
        sev: Severity = "info" if tls_env is None and dev_env is None else "warn"
        return [Finding("ucx", sev, "UCX resources unavailable", ucx.describe("UCX"),
                        "without UCX's own list fabscope cannot confirm UCX sees the intended devices",
                        "install libucx-dev (Debian) / ucx-devel (RHEL) and rebuild the engine: "
                        "`make setup`")]
    ev_base = listing(ucx)
    tls_ok, devs_ok = accepted(ucx)
    out: list[Finding] = []
    if tls_env is not None:
        neg, names = _split(tls_env)
        known = ucx.known_transport_names() | set(ucx.aliases)
        bad = [raw for raw in names if _tls_name(raw) not in tls_ok and _tls_name(raw) not in known]
        absent = [raw for raw in names if _tls_name(raw) not in tls_ok and _tls_name(raw) in known]
        ev = f"UCX_TLS={tls_env}; {ev_base}"
        if bad:
            out.append(Finding(
                "ucx.tls", "error", f"UCX_TLS names unknown transports: {', '.join(bad)}", ev,
                "UCX drops names it does not know; the run then uses whatever else is listed, or fails "
                "with 'no transports'",
                f"use names UCX offers here: {','.join(tls_ok)}"))
        if absent and not neg:
            out.append(Finding(
                "ucx.tls.absent", "warn",
                f"UCX_TLS asks for transports not available on this host: {', '.join(absent)}", ev,
                "UCX silently leaves them out; a benchmark meant for RDMA then runs over tcp or shared memory",
                "load the driver / cable the device these transports need, or remove them from UCX_TLS "
                f"(available here: {','.join(tls_ok)})"))
        if not bad and not (absent and not neg):
            out.append(Finding("ucx.tls", "ok", f"UCX_TLS={tls_env}: every name is known and available", ev))
    if dev_env is not None:
        _, names = _split(dev_env)
        missing = [n for n in names if n not in devs_ok]
        ev = f"UCX_NET_DEVICES={dev_env}; {ev_base}"
        if missing:
            out.append(Finding(
                "ucx.net_devices", "error",
                f"UCX_NET_DEVICES names devices UCX does not have: {', '.join(missing)}", ev,
                "UCX skips unknown devices without an error (UCX #4966/#7960 'No such device', UCX #10049 "
                "traffic on another device); the measurement then describes a different path",
                "use device names exactly as UCX lists them (RDMA ones with the port, e.g. mlx5_0:1); "
                f"available here: {', '.join(ucx.net_devices) or 'none'}"))
        else:
            out.append(Finding("ucx.net_devices", "ok", f"UCX_NET_DEVICES={dev_env}: all names exist", ev))
    if not out:
        out.append(Finding("ucx", "ok", "UCX_TLS and UCX_NET_DEVICES not set; UCX picks devices itself",
                           ev_base))
    return out
