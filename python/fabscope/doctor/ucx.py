"""UCX: every name in UCX_TLS and UCX_NET_DEVICES must exist in UCX's own device list
(`ucx_info -d`).  UCX drops names it cannot use with at most a warning, so a typo means
the run silently uses something else (UCX #10049, #4966, #7960)."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from fabscope.doctor.core import CommandResult, Context, Finding, Severity, check

# Transport names UCX knows (present or not on this host), and the aliases UCX_TLS accepts,
# with the transports each alias stands for (ucp_context.c's alias table).
KNOWN_TRANSPORTS = {
    "self", "tcp", "sysv", "posix", "cma", "knem", "xpmem", "rc_verbs", "ud_verbs", "rc_mlx5",
    "ud_mlx5", "dc_mlx5", "cuda_copy", "cuda_ipc", "gdr_copy", "rocm_copy", "rocm_ipc",
    "rocm_gdr", "ugni_smsg", "ugni_udt", "ugni_rdma", "rdmacm", "tcpcm", "sockcm", "ze_copy",
}
ALIASES: dict[str, set[str]] = {
    "all": set(),
    "mm": {"posix", "sysv", "xpmem"},
    "sm": {"posix", "sysv", "xpmem", "knem", "cma"},
    "shm": {"posix", "sysv", "xpmem", "knem", "cma"},
    "ib": {"rc_verbs", "ud_verbs", "rc_mlx5", "ud_mlx5", "dc_mlx5"},
    "ud_v": {"ud_verbs"}, "ud_x": {"ud_mlx5"}, "ud": {"ud_mlx5", "ud_verbs"},
    "rc_v": {"rc_verbs"}, "rc_x": {"rc_mlx5"}, "rc": {"rc_mlx5", "rc_verbs"},
    "dc": {"dc_mlx5"}, "dc_x": {"dc_mlx5"},
    "ugni": {"ugni_smsg", "ugni_udt", "ugni_rdma"},
    "cuda": {"cuda_copy", "cuda_ipc", "gdr_copy"},
    "rocm": {"rocm_copy", "rocm_ipc", "rocm_gdr"},
}


@dataclass
class UcxDevices:
    transports: set[str] = field(default_factory=set)
    devices: dict[str, set[str]] = field(default_factory=dict)  # device -> transports

    def net_devices(self) -> set[str]:
        # Memory "devices" (memory, memory0) are not selectable through UCX_NET_DEVICES.
        return {d for d in self.devices if not d.startswith("memory")}


def parse_ucx_info_d(text: str) -> UcxDevices:
    out = UcxDevices()
    tl: str | None = None
    for line in text.splitlines():
        m = re.match(r"#\s+Transport:\s+(\S+)", line)
        if m:
            tl = m.group(1)
            out.transports.add(tl)
            continue
        m = re.match(r"#\s+Device:\s+(\S+)", line)
        if m and tl is not None:
            out.devices.setdefault(m.group(1), set()).add(tl)
    return out


def ucx_devices(ctx: Context) -> tuple[UcxDevices | None, CommandResult]:
    # UCX_TLS/UCX_NET_DEVICES filter ucx_info's own output, so list devices without them.
    env = {k: v for k, v in ctx.env.items() if not k.startswith("UCX_")}
    res = ctx.runner.run(["ucx_info", "-d"], env=env)
    if not res.ok:
        return None, res
    return parse_ucx_info_d(res.stdout), res


def _split(value: str) -> tuple[bool, list[str]]:
    value = value.strip()
    neg = value.startswith("^")
    if neg:
        value = value[1:]
    return neg, [n.strip() for n in value.split(",") if n.strip()]


@check("ucx", "ucx")
def check_ucx(ctx: Context) -> list[Finding]:
    """UCX_TLS and UCX_NET_DEVICES names against `ucx_info -d`."""
    tls_env = ctx.env.get("UCX_TLS")
    dev_env = ctx.env.get("UCX_NET_DEVICES")
    info, res = ucx_devices(ctx)
    if info is None:
        sev: Severity = "info" if tls_env is None and dev_env is None else "warn"
        return [Finding("ucx", sev, "UCX device list unavailable", res.describe(),
                        "without `ucx_info -d` fabscope cannot confirm UCX sees the intended devices",
                        "install ucx-utils (Debian) / ucx (RHEL)")]
    listing = ", ".join(f"{d} ({'/'.join(sorted(t))})" for d, t in sorted(info.devices.items()))
    ev_base = f"`ucx_info -d` (without UCX_* variables) lists: {listing}"
    out: list[Finding] = []
    if tls_env is not None:
        neg, names = _split(tls_env)
        bad: list[str] = []
        absent: list[str] = []
        for raw in names:
            name = raw.split(":", 1)[0]  # "ud:aux" -> "ud"
            if name in info.transports:
                continue
            if name in ALIASES:
                if name != "all" and not (ALIASES[name] & info.transports):
                    absent.append(raw)
                continue
            if name in KNOWN_TRANSPORTS:
                absent.append(raw)
            else:
                bad.append(raw)
        ev = f"UCX_TLS={tls_env}; {ev_base}"
        if bad:
            out.append(Finding(
                "ucx.tls", "error", f"UCX_TLS names unknown transports: {', '.join(bad)}", ev,
                "UCX drops names it does not know; the run then uses whatever else is listed, or fails "
                "with 'no transports'",
                f"use names from `ucx_info -d` or UCX aliases (rc, ud, dc, sm, tcp, self, all); here: "
                f"{','.join(sorted(info.transports))}"))
        if absent and not neg:
            out.append(Finding(
                "ucx.tls.absent", "warn",
                f"UCX_TLS asks for transports not available on this host: {', '.join(absent)}", ev,
                "UCX silently leaves them out; a benchmark meant for RDMA then runs over tcp or shared memory",
                "load the driver / cable the device these transports need, or remove them from UCX_TLS"))
        if not bad and not (absent and not neg):
            out.append(Finding("ucx.tls", "ok", f"UCX_TLS={tls_env}: every name is known and available", ev))
    if dev_env is not None:
        _, names = _split(dev_env)
        known = info.net_devices()
        missing = [n for n in names if n != "all" and n not in known]
        ev = f"UCX_NET_DEVICES={dev_env}; {ev_base}"
        if missing:
            out.append(Finding(
                "ucx.net_devices", "error",
                f"UCX_NET_DEVICES names devices UCX does not have: {', '.join(missing)}", ev,
                "UCX skips unknown devices without an error (UCX #4966/#7960 'No such device', UCX #10049 "
                "traffic on another device); the measurement then describes a different path",
                f"use device names exactly as `ucx_info -d` prints them (RDMA ones with the port, "
                f"e.g. mlx5_0:1); available here: {', '.join(sorted(known)) or 'none'}"))
        else:
            out.append(Finding("ucx.net_devices", "ok", f"UCX_NET_DEVICES={dev_env}: all names exist", ev))
    if not out:
        out.append(Finding("ucx", "ok", "UCX_TLS and UCX_NET_DEVICES not set; UCX picks devices itself",
                           ev_base))
    return out
