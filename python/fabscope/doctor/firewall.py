# SPDX-License-Identifier: BSD-3-Clause
"""Firewall rules (iptables and nftables) that would drop RoCE v2 (UDP 4791) or fabscope's
control port (TCP 18515, the port perftest also uses)."""

from __future__ import annotations

import re
from dataclasses import dataclass

from fabscope.doctor.core import Context, Finding, check

ROCE_V2_PORT = 4791
CONTROL_PORT = 18515
WATCHED: list[tuple[str, int, str]] = [
    ("udp", ROCE_V2_PORT, "RoCE v2 (UDP 4791)"),
    ("tcp", CONTROL_PORT, "fabscope/perftest control port (TCP 18515)"),
]


@dataclass
class Verdict:
    proto: str
    port: int
    label: str
    action: str  # "drop", "reject", "accept", "policy-drop", "catch-all-drop"
    rule: str
    source: str


def _port_in(spec: str, port: int) -> bool:
    """Does an iptables/nft port spec ('4791', '4000:5000', '4000-5000', '{ 22, 4791 }',
    '22,4791') include ``port``?"""
    spec = spec.strip().strip("{}").strip()
    for part in re.split(r"[,\s]+", spec):
        if not part:
            continue
        m = re.fullmatch(r"(\d+)[:-](\d+)", part)
        if m:
            if int(m.group(1)) <= port <= int(m.group(2)):
                return True
        elif part.isdigit() and int(part) == port:
            return True
    return False


def analyse_iptables(text: str, source: str) -> list[Verdict]:
    """First matching verdict in the INPUT chain of the filter table for each watched port
    (iptables evaluates rules in order and stops at the first terminal match)."""
    table = ""
    policy: dict[str, str] = {}
    rules: list[str] = []
    for raw in text.splitlines():
        line = raw.strip()
        if line.startswith("*"):
            table = line[1:]
        elif table == "filter" and line.startswith(":"):
            parts = line[1:].split()
            if len(parts) >= 2:
                policy[parts[0]] = parts[1]
        elif table == "filter" and line.startswith("-A INPUT "):
            rules.append(line)
    out: list[Verdict] = []
    for proto, port, label in WATCHED:
        verdict: Verdict | None = None
        for rule in rules:
            m = re.search(r"-j\s+(\w+)", rule)
            target = m.group(1).upper() if m else ""
            if target not in ("ACCEPT", "DROP", "REJECT"):
                continue
            p = re.search(r"-p\s+(\w+)", rule)
            dport = re.search(r"--dports?\s+(\S+)", rule)
            if "--state" in rule or "--ctstate" in rule or " -s " in rule or " -i " in rule:
                # Connection-state, source- or interface-restricted rules do not decide for
                # every new packet; skip them rather than guess.
                continue
            if p is None and dport is None:
                if target in ("DROP", "REJECT"):
                    verdict = Verdict(proto, port, label, "catch-all-drop", rule, source)
                    break
                if target == "ACCEPT":
                    verdict = Verdict(proto, port, label, "accept", rule, source)
                    break
                continue
            if p is not None and p.group(1).lower() not in (proto, "all"):
                continue
            if dport is not None and not _port_in(dport.group(1), port):
                continue
            verdict = Verdict(proto, port, label, target.lower(), rule, source)
            break
        if verdict is None and policy.get("INPUT", "ACCEPT").upper() == "DROP":
            verdict = Verdict(proto, port, label, "policy-drop", ":INPUT DROP", source)
        if verdict is not None:
            out.append(verdict)
    return out


def analyse_nft(text: str, source: str) -> list[Verdict]:
    """Verdicts in nftables chains hooked on input.  Every base chain on the input hook
    must accept a packet for it to pass, so a drop in any of them counts."""
    out: list[Verdict] = []
    chains: list[tuple[str, str, list[str]]] = []  # (name, policy, rules)
    cur: tuple[str, str, list[str]] | None = None
    depth_chain = False
    for raw in text.splitlines():
        line = raw.strip()
        m = re.match(r"chain\s+(\S+)\s*\{", line)
        if m:
            cur = (m.group(1), "accept", [])
            depth_chain = False
            continue
        if cur is None:
            continue
        if line.startswith("type ") and "hook input" in line:
            pm = re.search(r"policy\s+(\w+)", line)
            cur = (cur[0], pm.group(1) if pm else "accept", cur[2])
            depth_chain = True
            continue
        if line == "}":
            if depth_chain:
                chains.append(cur)
            cur = None
            continue
        if line and not line.startswith("#"):
            cur[2].append(line)
    for name, policy, rules in chains:
        for proto, port, label in WATCHED:
            verdict: Verdict | None = None
            for rule in rules:
                vm = re.search(r"\b(accept|drop|reject)\b", rule)
                if vm is None:
                    continue
                action = vm.group(1)
                if "ct state" in rule or "saddr" in rule or "iifname" in rule or "iif " in rule:
                    continue
                pm = re.search(r"\b(udp|tcp|th)\s+dport\s+(\{[^}]*\}|\S+)", rule)
                if pm is None:
                    if re.search(r"\b(l4proto|udp|tcp)\b", rule):
                        continue  # protocol-only rules are too varied to judge; skip
                    verdict = Verdict(proto, port, label,
                                      "catch-all-drop" if action != "accept" else "accept",
                                      f"chain {name}: {rule}", source)
                    break
                if pm.group(1) not in (proto, "th"):
                    continue
                if not _port_in(pm.group(2), port):
                    continue
                verdict = Verdict(proto, port, label, action, f"chain {name}: {rule}", source)
                break
            if verdict is None and policy == "drop":
                verdict = Verdict(proto, port, label, "policy-drop", f"chain {name}: policy drop", source)
            if verdict is not None:
                out.append(verdict)
    return out


def _findings(verdicts: list[Verdict]) -> list[Finding]:
    out: list[Finding] = []
    blocked = [v for v in verdicts if v.action != "accept"]
    for v in blocked:
        how = {"drop": "drops", "reject": "rejects", "policy-drop": "drops (chain policy)",
               "catch-all-drop": "drops (catch-all rule)"}[v.action]
        fix_rule = (f"`iptables -I INPUT -p {v.proto} --dport {v.port} -j ACCEPT`" if v.source.startswith("iptables")
                    else f"`nft insert rule inet filter input {v.proto} dport {v.port} accept` "
                         "(use your table/chain names)")
        out.append(Finding(
            f"firewall.{v.proto}{v.port}", "error" if v.action in ("drop", "reject") else "warn",
            f"{v.source} {how} {v.label}", f"`{v.source}`: {v.rule}",
            "RoCE v2 rides UDP 4791; hardware RoCE (mlx5) bypasses netfilter but Soft-RoCE (rxe) and "
            "every TCP control connection do not, so runs hang at connection setup",
            fix_rule + ", and persist it in the firewall configuration"))
    return out


@check("firewall", "firewall")
def check_firewall(ctx: Context) -> list[Finding]:
    """iptables-save and nft rule sets that would drop UDP 4791 or TCP 18515."""
    verdicts: list[Verdict] = []
    looked: list[str] = []
    for argv, parse in ((["iptables-save"], analyse_iptables), (["nft", "list", "ruleset"], analyse_nft)):
        res = ctx.runner.run(argv)
        looked.append(res.describe())
        if res.ok:
            verdicts.extend(parse(res.stdout, " ".join(argv)))
        elif res.error is None and res.returncode != 0:
            looked[-1] += f" ({res.stderr.strip()[:120]})"
    ev = "; ".join(looked)
    findings = _findings(verdicts)
    if findings:
        return findings
    if all("not installed" in s for s in looked):
        return [Finding("firewall", "info", "neither iptables-save nor nft is installed: no netfilter "
                        "rules to inspect", ev)]
    ok_ports = ", ".join(label for _, _, label in WATCHED)
    return [Finding("firewall", "ok", f"no rule drops {ok_ports}", ev)]
