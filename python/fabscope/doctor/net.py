# SPDX-License-Identifier: BSD-3-Clause
"""IP-level checks: IPoIB mode and MTU, TCP buffer sysctls for high-bandwidth TCP."""

from __future__ import annotations

from fabscope.devices import read_text
from fabscope.doctor.core import Context, Finding, Severity, check

MIB = 1024 * 1024
# A 100 Gb/s stream with 1 ms of RTT in flight needs ~12 MiB of window; tuning guides for
# 25-100G NICs set the maxima to 16 MiB or more.
TCP_MIN_MAX_BYTES = 16 * MIB
FAST_GBPS = 25.0


@check("net.ipoib", "net")
def check_ipoib(ctx: Context) -> list[Finding]:
    """IPoIB netdevs: datagram vs connected mode, and MTU."""
    out: list[Finding] = []
    for nd in ctx.inventory.netdevs:
        if nd.kind != "ipoib":
            continue
        fid = f"net.ipoib.{nd.name}"
        mode_path = ctx.sys(f"class/net/{nd.name}/mode")
        ev = f"{mode_path} = {nd.ipoib_mode or 'unreadable'}; mtu = {nd.mtu if nd.mtu is not None else 'unknown'}"
        if nd.ipoib_mode == "datagram":
            out.append(Finding(
                fid, "warn", f"{nd.name}: IPoIB in datagram mode (MTU {nd.mtu})", ev,
                "datagram mode caps the MTU at the IB MTU minus 4 (2044 or 4092) and costs CPU per "
                "packet: about 5 Gbit/s vs 15 in connected mode in published IPoIB tests. (On "
                "ConnectX-4 and later with enhanced IPoIB, connected mode is not offered and datagram "
                "is expected.)",
                f"`echo connected > {mode_path}; ip link set {nd.name} mtu 65520` (persist in the "
                "interface config: CONNECTED_MODE=yes / MTU=65520)"))
        elif nd.ipoib_mode == "connected":
            sev: Severity = "ok" if (nd.mtu or 0) >= 65520 else "info"
            out.append(Finding(fid, sev, f"{nd.name}: IPoIB connected mode, MTU {nd.mtu}", ev,
                               "" if sev == "ok" else "connected mode allows MTU 65520",
                               "" if sev == "ok" else f"`ip link set {nd.name} mtu 65520`"))
        else:
            out.append(Finding(fid, "info", f"{nd.name}: IPoIB mode unknown", ev))
    if not out:
        out.append(Finding("net.ipoib", "ok", "no IPoIB interfaces", f"{ctx.sys('class/net')}: no netdev of type 32"))
    return out


def _sysctl(ctx: Context, name: str) -> tuple[str, list[int] | None]:
    path = ctx.proc("sys/" + name.replace(".", "/"))
    text = read_text(path)
    if text is None:
        return str(path), None
    try:
        return str(path), [int(x) for x in text.split()]
    except ValueError:
        return str(path), None


@check("net.tcp_buffers", "net")
def check_tcp_buffers(ctx: Context) -> list[Finding]:
    """net.core.rmem_max/wmem_max and the maxima of net.ipv4.tcp_rmem/tcp_wmem."""
    values: dict[str, int] = {}
    ev_parts = []
    for name, idx in (("net.core.rmem_max", 0), ("net.core.wmem_max", 0),
                      ("net.ipv4.tcp_rmem", 2), ("net.ipv4.tcp_wmem", 2)):
        path, vals = _sysctl(ctx, name)
        if vals is None or len(vals) <= idx:
            ev_parts.append(f"{name} ({path}) unreadable")
            continue
        values[name] = vals[idx]
        ev_parts.append(f"{name} = {' '.join(map(str, vals))}")
    ev = "; ".join(ev_parts)
    if not values:
        return [Finding("net.tcp_buffers", "info", "TCP buffer sysctls unreadable", ev)]
    small = {k: v for k, v in values.items() if v < TCP_MIN_MAX_BYTES}
    inv = ctx.inventory
    fastest = max([p.rate_gbps or 0.0 for _, p in inv.ports()]
                  + [(nd.speed_mbps or 0) / 1000.0 for nd in inv.netdevs], default=0.0)
    if not small:
        return [Finding("net.tcp_buffers", "ok", "TCP buffer limits allow >= 16 MiB windows", ev)]
    sev: Severity = "warn" if fastest >= FAST_GBPS else "info"
    names = ", ".join(f"{k}={v // 1024} KiB" for k, v in small.items())
    return [Finding(
        "net.tcp_buffers", sev, f"TCP buffer maxima below 16 MiB: {names}", ev,
        "one TCP stream can keep at most its window in flight; at 25-100 Gb/s with any real RTT a "
        "4 MiB cap limits a single stream well below line rate"
        + ("" if sev == "warn" else (f" (fastest link seen here: {fastest:g} Gb/s, so it matters less)" if fastest
                                    else " (no link speed readable here, so severity is only info)")),
        "sysctl -w net.core.rmem_max=268435456 net.core.wmem_max=268435456 "
        "net.ipv4.tcp_rmem='4096 131072 268435456' net.ipv4.tcp_wmem='4096 16384 268435456' "
        "(persist in /etc/sysctl.d/90-fabscope.conf)")]
