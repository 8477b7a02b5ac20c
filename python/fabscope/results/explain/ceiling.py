# SPDX-License-Identifier: BSD-3-Clause
"""The expected ceiling of a bandwidth result (the wire's rate less every header and the framing at the
active MTU, or the PCIe link when it is slower) and the references from the history a result is
measured against where no ceiling is known (latency always; bandwidth on a link of no known rate)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from ...untyped import count_at, member
from .facts import _day, _f, _four_digits, _gbps, _tcp_kernel, _us
from .model import BandwidthReference, Explanation, LatencyReference
from .packets import TCP_OVERHEAD

# The wire efficiency at the active MTU: payload bytes per packet over what the link carries for
# that packet. RoCE on Ethernet, per packet: preamble + start-of-frame delimiter (8, IEEE 802.3
# clause 3.2.1-2), the Ethernet header (14: two MACs and the EtherType), the frame check sequence
# (4), the inter-frame gap (12 byte times, 802.3 4.4.2): 38 B that every Ethernet frame costs.
ETHERNET_FRAMING = 8 + 14 + 4 + 12


# Above Ethernet, RoCE v2 (IBTA Annex A17): IPv4 (20) or IPv6 (40), UDP (8, port 4791), the IB base
# transport header (BTH, 12) and the invariant CRC (ICRC, 4). RoCE v1 (Annex A16) carries the IB
# global route header (GRH, 40) instead of IP and UDP. Extension headers (RETH 16 on the first
# packet of a write, AETH on acknowledgements) are per message, not per packet: left out.
IPV4_HEADER, IPV6_HEADER, UDP_HEADER, GRH = 20, 40, 8, 40


BTH, ICRC = 12, 4


# InfiniBand per packet (IBTA vol. 1, 5.2 and 7.8): the local route header (LRH, 8), BTH (12),
# ICRC (4) and the variant CRC (VCRC, 2); a GRH (40) when the QPs route through it.
LRH, VCRC = 8, 2


# TCP per segment on top of the MSS (the payload TCP_MAXSEG reports): IP (20 or 40), TCP (20) and
# the timestamp option (12, Linux's default), then the Ethernet framing above: TCP_OVERHEAD + 38.
# Ethernet is assumed (an IPoIB netdev's framing differs).
# The IB port rate as the kernel prints it (and the engine reports it: ibv_query_port's width x
# speed): SDR, DDR and QDR are signalling rates over 8b/10b line coding, so the data rate is 80 %
# of them; FDR10 and later are data rates after their coding (64b/66b; HDR/NDR PAM4 with FEC),
# except that FDR's 14 Gb/s per lane is a rounding of 14.0625 GBd x 64/66 = 13.64 Gb/s of data.
IB_LINE_CODING = {"SDR": (0.8, "a signalling rate: 8b/10b leaves 80 % for data"),
                  "DDR": (0.8, "a signalling rate: 8b/10b leaves 80 % for data"),
                  "QDR": (0.8, "a signalling rate: 8b/10b leaves 80 % for data"),
                  "FDR": (14.0625 * 64 / 66 / 14, "FDR's 14 Gb/s a lane is 14.0625 GBd x 64/66 = 13.64 Gb/s of data")}


# PCIe generation by GT/s a lane, for the basis text.
PCIE_GENERATION = {2.5: "1.0", 5.0: "2.0", 8.0: "3.0", 16.0: "4.0", 32.0: "5.0", 64.0: "6.0"}


def _wire(dev: Mapping[str, Any], local: Mapping[str, Any]) -> tuple[float | None, str]:
    """(payload share of the link, what it is) for the transport that carried the run; dev is the
    verbs device's description (local itself, or one of local["devices"])."""
    kind = dev.get("kind") or local.get("kind")
    if kind == "verbs":
        mtu = count_at(member(dev, "mtu"), "used")
        if not mtu:
            return None, "wire efficiency unknown: the record carries no path MTU"
        gid = member(dev, "gid")
        if dev.get("link_layer") == "InfiniBand":
            grh = GRH if gid.get("grh") is True else 0
            over = LRH + grh + BTH + ICRC + VCRC
            what = f"InfiniBand at MTU {mtu:,}: {mtu:,} B per packet + {over} B of LRH{', GRH' if grh else ''}, BTH, ICRC, VCRC"
        elif gid.get("type") == "RoCE v1":
            over = ETHERNET_FRAMING + GRH + BTH + ICRC
            what = f"RoCE v1 at MTU {mtu:,}: {mtu:,} B per packet + {over} B of headers and framing"
        else:
            ip = IPV4_HEADER if gid.get("ipv4") else IPV6_HEADER
            over = ETHERNET_FRAMING + ip + UDP_HEADER + BTH + ICRC
            what = f"RoCE v2 at MTU {mtu:,}: {mtu:,} B per packet + {over} B of headers and framing"
        return mtu / (mtu + over), what
    if _tcp_kernel(local):
        mss = count_at(local, "mss")
        if not mss:
            return None, "wire efficiency unknown: the record carries no MSS"
        addr = str(local.get("local_address") or "")
        over = TCP_OVERHEAD + (IPV6_HEADER - IPV4_HEADER if addr.startswith("[") else 0) + ETHERNET_FRAMING
        return mss / (mss + over), f"TCP at MSS {mss:,}: {mss:,} B per segment + {over} B of TCP/IP headers and Ethernet framing"
    return None, f"wire efficiency of the {kind or '?'} transport unknown"


def _pcie(dev: Mapping[str, Any]) -> tuple[float | None, str]:
    """(usable Gb/s of the device's PCIe link, its description) or (None, why unknown)."""
    p = member(dev, "pcie")
    usable, gts, width = _f(p, "usable_gbps"), _f(p, "gts"), count_at(p, "width")
    if not usable or not gts or not width:
        return None, f"PCIe unknown: {dev.get('pcie_source') or 'the record carries no PCIe link'}"
    gen = PCIE_GENERATION.get(gts, f"{gts:g} GT/s")
    return usable, (f"PCIe {gen} x{width} {_gbps(usable)} Gb/s usable after {p.get('encoding') or 'its line coding'} "
                    "(TLP/DLLP overhead lowers it further, to ~85-90 %)")


def _ceiling(dev: Mapping[str, Any], local: Mapping[str, Any]) -> tuple[float | None, str]:
    """The ceiling of one carrying device: min(link rate x wire efficiency, PCIe usable), and the
    basis naming each term and which one bounds."""
    rate = _f(dev, "rate_gbps")
    pcie, pcie_text = _pcie(dev)
    if not rate:
        name = dev.get("netdev") or local.get("address_owner") or dev.get("device") or dev.get("kind") or "?"
        why = dev.get("rate_source") or "virtual devices have none"
        return None, f"the record carries no link rate for {name} ({why}); {pcie_text}"
    coding, coding_text = IB_LINE_CODING.get(str(dev.get("ib_speed")), (1.0, ""))
    eff, wire_text = _wire(dev, local)
    link = rate * coding * (eff or 1.0)
    text = f"link {_gbps(rate)} Gb/s [{dev.get('rate_source') or 'its source not recorded'}]"
    if coding != 1.0:
        text += f" x {coding * 100:.1f} % ({dev.get('ib_speed')}: {coding_text})"
    if eff:
        text += f" x {eff * 100:.1f} % ({wire_text})"
    text += f" = {_gbps(link)} Gb/s" if eff or coding != 1.0 else ""
    if not eff:
        text += f" ({wire_text}: not applied)"
    if pcie is None:
        return link, f"{text}; {pcie_text}: the link bounds"
    bound = "the link bounds" if link <= pcie else "PCIe bounds"
    return min(link, pcie), f"{text}; {pcie_text}: {bound}"


# A latency record read on its own (compare, report, suite, a stored run): no reference was sought.
LATENCY_BASIS = ("latency has no universal ceiling; `fabscope run` takes the fabric's own best p50 of the same case "
                 "from the history as the reference (--reference TAG|RUN names one)")


def _expected(rec: Mapping[str, Any]) -> tuple[float | None, str, float | None]:
    """The bandwidth ceiling of the carrying device(s) (issue 20): the lowest of the link rate times
    the wire efficiency at the active MTU/MSS and the PCIe link's usable rate; several devices
    (verbs --device A,B) add up; bibw moves both directions of a full-duplex link at once."""
    local = member(member(rec, "transport"), "local")
    if rec.get("pattern") == "lat":
        return None, LATENCY_BASIS, None
    devs = [d for d in local.get("devices") or [] if isinstance(d, Mapping)] or [local]
    parts = [_ceiling(d, local) for d in devs]
    basis = "; ".join(f"{d.get('device')}: {t}" for d, (_, t) in zip(devs, parts, strict=True)) if len(devs) > 1 else parts[0][1]
    known = [g for g, _ in parts if g]
    if len(known) < len(parts):
        return None, basis, None
    rate = sum(known)
    if len(devs) > 1:
        basis += f"; the devices together: {_gbps(rate)} Gb/s"
    if rec.get("pattern") == "bibw":
        rate *= 2
        basis += f"; both directions at once (bibw): 2 x = {_gbps(rate)} Gb/s"
    got = rec.get("bandwidth_gbps")
    frac = _four_digits(float(got) / rate) if isinstance(got, (int, float)) and not isinstance(got, bool) else None
    return round(rate, 4), basis, frac


def _reference_basis(ref: LatencyReference) -> str:
    tag = f"tag {ref.tag}, " if ref.tag else ""
    n = ref.runs_considered
    if ref.named is None:
        return (f"the fabric's own best: p50 {_us(ref.p50_us)} us in run {ref.run_id} ({tag}{_day(ref.when)}), "
                f"the best of {n} stored run{'s' if n != 1 else ''} of this case")
    if ref.run_id is not None:
        return (f"the reference named (--reference {ref.named}): p50 {_us(ref.p50_us)} us in run {ref.run_id} "
                f"({tag}{_day(ref.when)})")
    runs = ", ".join(str(i) for i in ref.run_ids)
    return (f"the reference named (--reference {ref.named}): the median p50 {_us(ref.p50_us)} us of {n} runs of "
            f"this case (runs {runs}; {tag}{_day(ref.when)})")


def with_reference(expl: Explanation, p50_us: float, found: LatencyReference | None, history: str,
                   unread: str | None = None) -> Explanation:
    """A latency explanation with its reference from the history (fabscope/reference.py looks it
    up): ``achieved_fraction`` = the reference's p50 / this run's p50 (1.0: as good as the
    reference; 0.5: twice as slow). No reference: the basis says why (``unread``: the history
    could not be read, and why; else no earlier run of this case is in ``history``)."""
    if found is None:
        why = (f"the history ({history}) could not be read ({unread})" if unread
               else f"no earlier run of this case in the history ({history})")
        return replace(expl, expected_basis=f"{why}: latency has no universal ceiling, so this run has no reference",
                       achieved_fraction=None, reference=None, reference_sought=True)
    frac = _four_digits(found.p50_us / p50_us) if p50_us > 0 else None
    return replace(expl, expected_basis=_reference_basis(found), achieved_fraction=frac, reference=found,
                   reference_sought=True)


def _bandwidth_basis(ref: BandwidthReference) -> str:
    tag = f"tag {ref.tag}, " if ref.tag else ""
    n = ref.runs_considered
    if ref.named is None:
        return (f"its own best: {_gbps(ref.gbps)} Gb/s in run {ref.run_id} ({tag}{_day(ref.when)}), the best of {n} "
                f"stored run{'s' if n != 1 else ''} of this case")
    if ref.run_id is not None:
        return (f"the reference named (--reference {ref.named}): {_gbps(ref.gbps)} Gb/s in run {ref.run_id} "
                f"({tag}{_day(ref.when)})")
    return (f"the reference named (--reference {ref.named}): the median {_gbps(ref.gbps)} Gb/s of {n} runs of this case "
            f"({tag}{_day(ref.when)})")


def with_bandwidth_reference(expl: Explanation, gbps: float, found: BandwidthReference | None, history: str,
                             unread: str | None = None) -> Explanation:
    """A bandwidth explanation with its reference from the history (fabscope/reference.py looks it
    up). Where no ceiling is known (no link rate), the reference is what the run is measured against
    (``achieved_fraction`` = this run / the reference); where one is, the basis also says how far
    below its own best the run is."""
    if found is None:
        why = (f"the history ({history}) could not be read ({unread})" if unread
               else f"no earlier run of this case in the history ({history})")
        return replace(expl, expected_basis=f"{expl.expected_basis}; {why} to compare with", reference_sought=True)
    versus = (f"{found.gbps / gbps:.2f} x below {_bandwidth_basis(found)}" if gbps < found.gbps
              else f"at or above {_bandwidth_basis(found)}")
    if expl.expected_gbps is None:
        frac = _four_digits(gbps / found.gbps) if found.gbps > 0 else None
        return replace(expl, expected_basis=f"{expl.expected_basis}; this run: {versus}", achieved_fraction=frac,
                       bandwidth_reference=found, reference_sought=True)
    return replace(expl, expected_basis=f"{expl.expected_basis}; this run: {versus}", bandwidth_reference=found,
                   reference_sought=True)
