# SPDX-License-Identifier: BSD-3-Clause
"""fabscope doctor: every check with a passing and a failing case.

Fixtures are copies of real layouts (tests/fixtures/sysfs/*/NOTE.md).  Where no published
listing covers a branch (a netdev speed next to a port rate, a cpufreq governor, an IPoIB
mode) the test copies a real fixture into tmp_path and adds the one file it needs; those
tests say so in their names ("_synthetic").  Each sysfs fixture goes with the engine
inventory of the same host (tests/fixtures/inventory/README.md) for its verbs part; UCX and
libfabric are this machine's real ones (its engine's --inventory-json), and ompi_info is the
real tool; only firewall dumps and an Open MPI 5.x ompi_info, which cannot run here, are fake
commands.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from fabscope.doctor import (
    CHECKS,
    CommandRunner,
    Context,
    Finding,
    HostFacts,
    collect_host_facts,
    compare_hosts,
    run_doctor,
)
from fabscope.doctor.cli_entry import main_doctor
from fabscope.doctor.core import check, run_checks
from fabscope.inventory import EngineInventory, load, query

FIX = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
PYDIR = Path(__file__).resolve().parents[2] / "python"


def fx(name: str) -> Path:
    return FIX / name


_LIVE: list[EngineInventory] = []


def live_inventory() -> EngineInventory:
    """This machine's engine inventory, asked once for the whole file."""
    if not _LIVE:
        _LIVE.append(query())
    return _LIVE[0]


def fixture_inventory(root: Path) -> EngineInventory | None:
    """The verbs part of the fixture's own inventory with this host's UCX and libfabric."""
    name = root.parent.name if root.name == "sys" else root.name
    path = INV / f"{name}.json"
    if not path.exists():
        return None
    live = live_inventory()
    return replace(load(path), ucx=live.ucx, ofi=live.ofi)


def ctx(sysfs: Path | str = "/sys", env: dict[str, str] | None = None, **kw: object) -> Context:
    root = Path(sysfs)
    base_env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
    base_env.update(env or {})
    inv = live_inventory() if str(sysfs) == "/sys" else fixture_inventory(root)
    return Context(sysfs_root=root, env=base_env, engine_inventory_override=inv,
                   **kw)  # type: ignore[arg-type]


def run(c: Context, name: str) -> list[Finding]:
    return CHECKS[name].fn(c)


def sev(findings: list[Finding], prefix: str) -> set[str]:
    return {f.severity for f in findings if f.id.startswith(prefix)}


def copy_fixture(name: str, tmp_path: Path) -> Path:
    dst = tmp_path / name
    shutil.copytree(fx(name), dst, symlinks=True)
    return dst


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def fake_cmd(tmp_path: Path, name: str, output: str) -> str:
    path = tmp_path / f"fake-{name}"
    path.write_text("#!/bin/sh\ncat <<'FABSCOPE_EOF'\n" + output + "\nFABSCOPE_EOF\n")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return str(path)


# ---------------------------------------------------------------- rdma.devices / ports


def test_rdma_devices_present_and_absent() -> None:
    assert sev(run(ctx(fx("mlx5-roce-ndr")), "rdma.devices"), "rdma") == {"ok"}
    (f,) = run(ctx(fx("host-no-rdma")), "rdma.devices")
    assert f.severity == "info" and "no RDMA device" in f.title


def test_port_state_active_ok_and_down_error() -> None:
    assert sev(run(ctx(fx("mlx5-roce-ndr")), "ports.state"), "ports.state") == {"ok"}
    out = run(ctx(fx("ib-no-sm")), "ports.state")
    down = [f for f in out if f.id == "ports.state.mlx5_0/1"]
    assert down and down[0].severity == "error" and "DOWN" in down[0].title
    assert "state = 1: DOWN" not in down[0].evidence  # evidence shows the parsed value
    assert "/ports/1/state = DOWN" in down[0].evidence


def test_no_subnet_manager_error_and_sm_present_ok() -> None:
    out = run(ctx(fx("ib-no-sm")), "ports.sm")
    init = [f for f in out if f.id == "ports.sm.mlx5_1/1"]
    assert init and init[0].severity == "error" and "no subnet manager" in init[0].title
    assert "opensm" in init[0].fix
    ok = run(ctx(fx("ib-with-sm")), "ports.sm")
    assert [f.severity for f in ok] == ["ok"] and "0x1" in ok[0].title
    roce = run(ctx(fx("mlx5-roce-ndr")), "ports.sm")
    assert sev(roce, "ports.sm") == {"ok"} and "no subnet manager needed" in roce[0].title


def test_link_layer_expected_and_unexpected() -> None:
    good = run(ctx(fx("ib-with-sm"), expected_link_layer="InfiniBand"), "ports.link_layer")
    assert sev(good, "ports.link_layer") == {"ok"}
    bad = run(ctx(fx("ib-with-sm"), expected_link_layer="Ethernet"), "ports.link_layer")
    assert bad[0].severity == "error" and "LINK_TYPE_P1" in bad[0].fix


def test_active_mtu_below_max_warns_and_full_mtu_ok() -> None:
    # MTUs from the published ibv_devinfo listings (inventory fixtures); no netdev in either.
    out = run(ctx(fx("mlx5-roce-azure")), "ports.mtu")
    assert out[0].severity == "warn" and "1024 below max 4096" in out[0].title
    assert "ibv_query_port" in out[0].evidence and "mtu" in out[0].fix
    assert sev(run(ctx(fx("mlx5-roce-h100")), "ports.mtu"), "ports.mtu") == {"ok"}


def test_roce_mtu_limited_by_the_netdev_says_fix_the_netdev() -> None:
    # The captured guest: rxe0 on eth0 with MTU 1500 -> active 1024 of max 4096.
    (f,) = run(ctx(fx("rxe-qemu") / "sys"), "ports.mtu")
    assert f.severity == "warn" and "netdev eth0 MTU 1500 limits RoCE to 1024" in f.title
    assert "`ip link set dev eth0 mtu 9000`" in f.fix and "rdma link" not in f.fix
    assert "active_mtu 1024, max_mtu 4096" in f.evidence


def test_roce_mtu_below_what_the_netdev_allows_says_fix_the_rdma_side_synthetic(tmp_path: Path) -> None:
    # The same guest with its netdev raised to 9000 while rxe0 still reports 1024.
    root = copy_fixture("rxe-qemu", tmp_path) / "sys"
    write(root / "class/net/eth0/mtu", "9000\n")
    (f,) = run(ctx(root), "ports.mtu")
    assert f.severity == "warn" and "below the 4096 its netdev eth0 (MTU 9000) allows" in f.title
    assert "rdma link add rxe0 type rxe netdev eth0" in f.fix and "mtu 9000" in f.fix
    # ... and once the RDMA side follows, all is well.
    data = json.loads((INV / "rxe-qemu.json").read_text())
    data["verbs"]["devices"][0]["ports"][0]["active_mtu"] = 4096
    followed = EngineInventory.from_dict(data, source="test")
    (ok,) = run(Context(sysfs_root=root, env={}, engine_inventory_override=followed), "ports.mtu")
    assert ok.severity == "ok" and "4096" in ok.title


def test_roce_mtu_mismatch_between_hosts_names_the_smaller_host(tmp_path: Path) -> None:
    small = collect_host_facts(ctx(fx("rxe-qemu") / "sys"))
    big = dict(small, hostname="peer", port_active_mtus={"rxe0/1": 4096},
               netdev_mtus={**small["netdev_mtus"], "eth0": 9000})
    assert small["port_active_mtus"] == {"rxe0/1": 1024}
    out = {f.id: f for f in compare_hosts(small, big)}
    f = out["crosshost.rdma_mtu"]
    assert f.severity == "warn" and "1024" in f.title and "4096 on peer" in f.title
    assert f.fix.startswith(f"on {small['hostname']}, the host with the smaller MTU")
    assert "ip link set dev <netdev> mtu 9000" in f.fix


def test_roce_mtu_derived_from_netdev_synthetic(tmp_path: Path) -> None:
    # mlx5-roce-gids names its netdev (ens1f0) but not its MTU, and has no verbs listing: the
    # active MTU is derived from the netdev MTU (labelled so).
    root = copy_fixture("mlx5-roce-gids", tmp_path)
    write(root / "class/net/ens1f0/mtu", "1500\n")
    write(root / "class/net/ens1f0/type", "1\n")
    out = run(ctx(root), "ports.mtu")
    assert out[0].severity == "warn" and "ens1f0 MTU 1500 limits RoCE to 1024" in out[0].title
    assert "derived from netdev ens1f0" in out[0].evidence
    write(root / "class/net/ens1f0/mtu", "9000\n")
    out = run(ctx(root), "ports.mtu")
    assert out[0].severity == "ok" and "4096" in out[0].title


def _ndr_with_netdev(tmp_path: Path, speed: int) -> Path:
    root = copy_fixture("mlx5-roce-ndr", tmp_path)
    write(root / "class/infiniband/mlx5_0/ports/1/gid_attrs/ndevs/0", "eth2\n")
    write(root / "class/net/eth2/speed", f"{speed}\n")
    write(root / "class/net/eth2/type", "1\n")
    return root


def test_rate_matches_netdev_synthetic(tmp_path: Path) -> None:
    out = run(ctx(_ndr_with_netdev(tmp_path, 400000)), "ports.rate")
    assert [f.severity for f in out if f.id == "ports.rate.mlx5_0/1"] == ["ok"]


def test_rate_mismatch_warns_synthetic(tmp_path: Path) -> None:
    out = run(ctx(_ndr_with_netdev(tmp_path, 100000)), "ports.rate")
    mism = [f for f in out if f.id == "ports.rate.mlx5_0/1"]
    assert mism[0].severity == "warn" and "400 Gb/s but netdev speed 100 Gb/s" in mism[0].title


def test_pcie_downgrade_warns() -> None:
    out = run(ctx(fx("ib-no-sm")), "ports.pcie")
    assert {f.severity for f in out} == {"warn"} and "x8 of x16" in out[0].title


def test_pcie_full_width_ok_synthetic(tmp_path: Path) -> None:
    root = copy_fixture("ib-no-sm", tmp_path)
    for fn in ("000a:11:00.0", "000a:11:00.1"):
        write(root / f"devices/pci000a:11/{fn}/current_link_width", "16\n")
    assert sev(run(ctx(root), "ports.pcie"), "ports.pcie") == {"ok"}


# ---------------------------------------------------------------- gid


def test_gid_roce_v2_not_at_index_0() -> None:
    (f,) = run(ctx(fx("mlx5-roce-gids")), "gid.roce_v2")
    assert f.severity == "warn" and "index 5" in f.title and "172.19.0.60" in f.title
    assert "link-local IB/RoCE v1" in f.title and "-x 5" in f.fix
    pod = run(ctx(fx("mlx5-roce-pod-gids")), "gid.roce_v2")
    assert all(x.severity == "warn" and "index 7" in x.title and "nothing (empty slot)" in x.title for x in pod)


def test_gid_index0_is_roce_v2_ok_synthetic(tmp_path: Path) -> None:
    root = copy_fixture("mlx5-roce-gids", tmp_path)
    p = root / "class/infiniband/mlx5_0/ports/1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        for i in range(1, 6):
            (p / sub / str(i)).unlink()
        shutil.copy(fx("mlx5-roce-gids") / "class/infiniband/mlx5_0/ports/1" / sub / "5", p / sub / "0")
    (f,) = run(ctx(root), "gid.roce_v2")
    assert f.severity == "ok"


def test_gid_without_roce_v2_is_error_synthetic(tmp_path: Path) -> None:
    root = copy_fixture("mlx5-roce-gids", tmp_path)
    p = root / "class/infiniband/mlx5_0/ports/1"
    for i in (1, 3, 5):
        for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
            (p / sub / str(i)).unlink()
    (f,) = run(ctx(root), "gid.roce_v2")
    assert f.severity == "error" and "no RoCE v2 GID" in f.title


# ---------------------------------------------------------------- memlock


def _memlock_in_child(limit: int, sysfs: Path) -> list[dict[str, str]]:
    """Set RLIMIT_MEMLOCK for real in a child process and run the check there."""
    code = (
        "import json, resource, sys\n"
        "try:\n"
        f"    resource.setrlimit(resource.RLIMIT_MEMLOCK, ({limit}, {limit}))\n"
        "except (ValueError, OSError) as exc:\n"
        "    print(json.dumps({'skip': str(exc)})); sys.exit(0)\n"
        "from fabscope.doctor import CHECKS, Context\n"
        f"c = Context(sysfs_root=__import__('pathlib').Path({str(sysfs)!r}))\n"
        "print(json.dumps([f.to_dict() for f in CHECKS['memlock.shell'].fn(c)]))\n"
    )
    env = dict(os.environ, PYTHONPATH=str(PYDIR))
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    data = json.loads(out.stdout)
    if isinstance(data, dict):
        pytest.skip(f"cannot set RLIMIT_MEMLOCK to {limit} here: {data['skip']}")
    return data  # type: ignore[no-any-return]


def test_memlock_unlimited_ok_in_real_child() -> None:
    import resource
    (f,) = _memlock_in_child(resource.RLIM_INFINITY, fx("mlx5-roce-ndr"))
    assert f["severity"] == "ok"


def test_memlock_unlimited_ok_logic() -> None:
    # Raising the hard limit needs CAP_SYS_RESOURCE, which a container may lack; the real-child
    # test above then skips and this one still checks the verdict for an unlimited limit.
    import resource

    from fabscope.doctor.memlock import memlock_shell_findings
    (f,) = memlock_shell_findings(resource.RLIM_INFINITY, resource.RLIM_INFINITY, True)
    assert f.severity == "ok"
    (g,) = memlock_shell_findings(8 * 1024 * 1024, 8 * 1024 * 1024, True)
    assert g.severity == "warn" and "8 MiB" in g.title


def test_memlock_64k_error_in_real_child() -> None:
    (f,) = _memlock_in_child(64 * 1024, fx("mlx5-roce-ndr"))
    assert f["severity"] == "error" and "64 KiB" in f["title"] and "limits.d" in f["fix"]
    (g,) = _memlock_in_child(64 * 1024, fx("host-no-rdma"))
    assert g["severity"] == "info"  # no RDMA device: it cannot bite yet


def test_memlock_noninteractive_real_etc_warns_with_rdma() -> None:
    """The real /etc of this machine, with an RDMA device present (fixture)."""
    files = [Path("/etc/security/limits.conf"), *sorted(Path("/etc/security/limits.d").glob("*.conf"))]
    star_lines = [ln for f in files if f.exists() for ln in f.read_text().splitlines()
                  if ln.split("#", 1)[0].split()[:1] == ["*"] and "memlock" in ln.split("#", 1)[0]]
    out = {f.id: f for f in run(ctx(fx("mlx5-roce-ndr")), "memlock.noninteractive")}
    main = out["memlock.noninteractive"]
    assert "/etc/security/limits.conf" in main.evidence or "limits.d" in main.evidence
    if not star_lines:
        assert main.severity == "warn" and "no memlock line" in main.title


def test_memlock_noninteractive_configured_ok(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    write(etc / "security/limits.conf", "# empty\n")
    write(etc / "security/limits.d/90-rdma.conf", "* soft memlock unlimited\n* hard memlock unlimited\n")
    write(etc / "pam.d/sshd", "@include common-account\n@include common-session\n")
    write(etc / "pam.d/common-session", "session required pam_limits.so\n")
    out = run(ctx(fx("mlx5-roce-ndr"), etc_root=etc), "memlock.noninteractive")
    assert {f.id: f.severity for f in out} == {"memlock.noninteractive": "ok", "memlock.pam": "ok"}


def test_memlock_noninteractive_small_and_no_pam_limits(tmp_path: Path) -> None:
    etc = tmp_path / "etc"
    write(etc / "security/limits.conf", "*   soft   memlock   64\n*  hard memlock 64\n")
    write(etc / "pam.d/sshd", "session required pam_env.so\n")
    out = {f.id: f for f in run(ctx(fx("mlx5-roce-ndr"), etc_root=etc), "memlock.noninteractive")}
    assert out["memlock.noninteractive"].severity == "error"
    assert "limits.conf:1" in out["memlock.noninteractive"].evidence
    assert out["memlock.pam"].severity == "warn" and "pam_limits.so" in out["memlock.pam"].fix


# ---------------------------------------------------------------- cpu


def _numa_root(tmp_path: Path, cpulist: str) -> Path:
    # ib-no-sm puts the HCAs on NUMA node 2 but does not list that node's CPUs.
    root = copy_fixture("ib-no-sm", tmp_path)
    write(root / "devices/system/node/node2/cpulist", cpulist + "\n")
    return root


def test_numa_remote_cpus_warn_synthetic(tmp_path: Path) -> None:
    out = run(ctx(_numa_root(tmp_path, "16-31"), cpu_affinity={0, 1}), "cpu.numa")
    assert {f.severity for f in out} == {"warn"} and "numactl --cpunodebind=2" in out[0].fix


def test_numa_local_cpus_ok_synthetic(tmp_path: Path) -> None:
    out = run(ctx(_numa_root(tmp_path, "0-1"), cpu_affinity={0, 1}), "cpu.numa")
    assert {f.severity for f in out} == {"ok"}


def test_numa_of_a_software_rdma_device_is_its_netdevs() -> None:
    """rxe0 has no PCI function: the adapter under it is eth0's, on node 1 in the NUMA guest's capture."""
    remote = run(ctx(FIX / "rxe-qemu-numa-2x2", cpu_affinity={0, 1}), "cpu.numa")  # node 0
    assert [(f.id, f.severity) for f in remote] == [("cpu.numa.rxe0", "warn")]
    assert "NUMA node 1" in remote[0].title and "--cpu auto" in remote[0].fix
    near = run(ctx(FIX / "rxe-qemu-numa-2x2", cpu_affinity={2, 3}), "cpu.numa")
    assert [(f.id, f.severity) for f in near] == [("cpu.numa.rxe0", "ok")]


def test_numa_live_uses_real_affinity() -> None:
    out = run(ctx(), "cpu.numa")
    assert out and all(f.severity in ("ok", "info", "warn") for f in out)
    assert any(str(min(os.sched_getaffinity(0))) in f.evidence for f in out)


def test_governor_absent_in_vm_capture_is_info() -> None:
    (f,) = run(ctx(fx("host-no-rdma")), "cpu.governor")
    assert f.severity == "info" and "no cpufreq" in f.title


def test_governor_powersave_warns_and_performance_ok_synthetic(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    write(root / "devices/system/cpu/online", "0\n")
    write(root / "devices/system/cpu/cpu0/cpufreq/scaling_governor", "powersave\n")
    (f,) = run(ctx(root), "cpu.governor")
    assert f.severity == "warn" and "performance" in f.fix
    write(root / "devices/system/cpu/cpu0/cpufreq/scaling_governor", "performance\n")
    (g,) = run(ctx(root), "cpu.governor")
    assert g.severity == "ok"


def test_haltpoll_finding_from_captured_fixture() -> None:
    out = {f.id: f for f in run(ctx(fx("host-no-rdma")), "cpu.idle")}
    hp = out["cpu.idle.haltpoll"]
    assert hp.severity == "warn" and "40 us" in hp.title
    assert "guest_halt_poll_ns = 0" in hp.evidence
    assert "cpu.idle.cstates" not in out  # POLL 0 us, haltpoll 1 us: nothing deep


def test_idle_shallow_states_ok_and_deep_states_warn_synthetic(tmp_path: Path) -> None:
    root = tmp_path / "sys"
    write(root / "devices/system/cpu/cpuidle/current_driver", "intel_idle\n")
    write(root / "devices/system/cpu/cpuidle/current_governor", "menu\n")
    for i, (name, lat) in enumerate([("POLL", 0), ("C1", 2)]):
        write(root / f"devices/system/cpu/cpu0/cpuidle/state{i}/name", name + "\n")
        write(root / f"devices/system/cpu/cpu0/cpuidle/state{i}/latency", f"{lat}\n")
        write(root / f"devices/system/cpu/cpu0/cpuidle/state{i}/disable", "0\n")
    out = {f.id: f.severity for f in run(ctx(root), "cpu.idle")}
    assert out["cpu.idle"] == "ok"
    write(root / "devices/system/cpu/cpu0/cpuidle/state2/name", "C6\n")
    write(root / "devices/system/cpu/cpu0/cpuidle/state2/latency", "133\n")
    write(root / "devices/system/cpu/cpu0/cpuidle/state2/disable", "0\n")
    out2 = {f.id: f for f in run(ctx(root), "cpu.idle")}
    assert out2["cpu.idle.cstates"].severity == "warn" and "133 us" in out2["cpu.idle.cstates"].title


# ---------------------------------------------------------------- net


def test_ipoib_datagram_warns_connected_ok_synthetic(tmp_path: Path) -> None:
    root = copy_fixture("ib-no-sm", tmp_path)
    base = root / "devices/pci000a:11/000a:11:00.1/net/ib1"
    write(base / "mode", "datagram\n")
    write(base / "mtu", "2044\n")
    out = {f.id: f for f in run(ctx(root), "net.ipoib")}
    assert out["net.ipoib.ib1"].severity == "warn" and "connected" in out["net.ipoib.ib1"].fix
    write(base / "mode", "connected\n")
    write(base / "mtu", "65520\n")
    out = {f.id: f for f in run(ctx(root), "net.ipoib")}
    assert out["net.ipoib.ib1"].severity == "ok"


def test_no_ipoib_on_this_machine() -> None:
    assert [f.severity for f in run(ctx(), "net.ipoib")] == ["ok"]


def _proc(tmp_path: Path, rmem: int, tcp_max: int) -> Path:
    proc = tmp_path / "proc"
    write(proc / "sys/net/core/rmem_max", f"{rmem}\n")
    write(proc / "sys/net/core/wmem_max", f"{rmem}\n")
    write(proc / "sys/net/ipv4/tcp_rmem", f"4096\t131072\t{tcp_max}\n")
    write(proc / "sys/net/ipv4/tcp_wmem", f"4096\t16384\t{tcp_max}\n")
    return proc


def test_tcp_buffers_small_with_fast_link_warn(tmp_path: Path) -> None:
    (f,) = run(ctx(fx("mlx5-roce-ndr"), proc_root=_proc(tmp_path, 212992, 6291456)), "net.tcp_buffers")
    assert f.severity == "warn" and "net.core.rmem_max=208 KiB" in f.title


def test_tcp_buffers_large_ok(tmp_path: Path) -> None:
    (f,) = run(ctx(fx("mlx5-roce-ndr"), proc_root=_proc(tmp_path, 268435456, 268435456)), "net.tcp_buffers")
    assert f.severity == "ok"


def test_tcp_buffers_live_proc() -> None:
    (f,) = run(ctx(), "net.tcp_buffers")
    real = int(Path("/proc/sys/net/core/rmem_max").read_text())
    assert f"net.core.rmem_max = {real}" in f.evidence


# ---------------------------------------------------------------- firewall

IPTABLES_DROP = """# Generated by iptables-save v1.8.9 (nf_tables)
*filter
:INPUT ACCEPT [0:0]
:FORWARD ACCEPT [0:0]
:OUTPUT ACCEPT [0:0]
-A INPUT -p tcp -m tcp --dport 22 -j ACCEPT
-A INPUT -p udp -m udp --dport 4791 -j DROP
COMMIT"""

IPTABLES_REJECT_ALL = """*filter
:INPUT ACCEPT [0:0]
-A INPUT -m state --state RELATED,ESTABLISHED -j ACCEPT
-A INPUT -p tcp -m state --state NEW -m tcp --dport 22 -j ACCEPT
-A INPUT -j REJECT --reject-with icmp-host-prohibited
COMMIT"""

NFT_OPEN = """table inet filter {
	chain input {
		type filter hook input priority filter; policy drop;
		ct state established,related accept
		udp dport 4791 accept
		tcp dport { 22, 18515 } accept
	}
}"""

NFT_DROP = """table inet filter {
	chain input {
		type filter hook input priority filter; policy accept;
		tcp dport 18000-19000 drop
	}
}"""


def test_firewall_not_installed_here_is_info() -> None:
    (f,) = run(ctx(), "firewall")
    if shutil.which("iptables-save") is None and shutil.which("nft") is None:
        assert f.severity == "info" and "not installed" in f.evidence


def test_firewall_iptables_drop_4791_error(tmp_path: Path) -> None:
    runner = CommandRunner({"iptables-save": fake_cmd(tmp_path, "ipt", IPTABLES_DROP),
                            "nft": fake_cmd(tmp_path, "nft", NFT_OPEN)})
    out = run(ctx(runner=runner), "firewall")
    assert [(f.id, f.severity) for f in out] == [("firewall.udp4791", "error")]
    assert "--dport 4791 -j DROP" in out[0].evidence and "iptables -I INPUT -p udp --dport 4791" in out[0].fix


def test_firewall_catch_all_reject_warns(tmp_path: Path) -> None:
    runner = CommandRunner({"iptables-save": fake_cmd(tmp_path, "ipt", IPTABLES_REJECT_ALL),
                            "nft": str(tmp_path / "absent-nft")})
    out = {f.id: f.severity for f in run(ctx(runner=runner), "firewall")}
    assert out == {"firewall.udp4791": "warn", "firewall.tcp18515": "warn"}


def test_firewall_nft_policy_drop_with_accepts_ok(tmp_path: Path) -> None:
    runner = CommandRunner({"iptables-save": str(tmp_path / "absent"), "nft": fake_cmd(tmp_path, "nft", NFT_OPEN)})
    (f,) = run(ctx(runner=runner), "firewall")
    assert f.severity == "ok"


def test_firewall_nft_port_range_drop_error(tmp_path: Path) -> None:
    runner = CommandRunner({"iptables-save": str(tmp_path / "absent"), "nft": fake_cmd(tmp_path, "nft", NFT_DROP)})
    out = run(ctx(runner=runner), "firewall")
    assert [(f.id, f.severity) for f in out] == [("firewall.tcp18515", "error")]


# ---------------------------------------------------------------- ucx (this host's real UCX)


def _needs_ucx() -> None:
    if not live_inventory().ucx.ok:
        pytest.skip(f"engine without UCX: {live_inventory().ucx.describe('UCX')}")


def test_ucx_invalid_net_device_is_error() -> None:
    _needs_ucx()
    out = run(ctx(env={"UCX_NET_DEVICES": "mlx5_9:1"}), "ucx")
    (f,) = [x for x in out if x.id == "ucx.net_devices"]
    assert f.severity == "error" and "mlx5_9:1" in f.title
    assert "lo" in f.fix  # the real device list is offered


def test_ucx_valid_net_device_ok() -> None:
    _needs_ucx()
    dev = live_inventory().ucx.net_devices[0]
    (f,) = [x for x in run(ctx(env={"UCX_NET_DEVICES": dev}), "ucx") if x.id == "ucx.net_devices"]
    assert f.severity == "ok"


def test_ucx_tls_unknown_absent_and_ok() -> None:
    _needs_ucx()
    out = {f.id: f.severity for f in run(ctx(env={"UCX_TLS": "tcp,tpc"}), "ucx")}
    assert out["ucx.tls"] == "error"
    if not Path("/sys/class/infiniband").exists():
        out = {f.id: f.severity for f in run(ctx(env={"UCX_TLS": "rc,self"}), "ucx")}
        assert out["ucx.tls.absent"] == "warn"
    out = {f.id: f.severity for f in run(ctx(env={"UCX_TLS": "tcp,self,sm"}), "ucx")}
    assert out == {"ucx.tls": "ok"}


# ---------------------------------------------------------------- openmpi (real ompi_info, real /etc)

needs_ompi = pytest.mark.skipif(shutil.which("ompi_info") is None
                                or not Path("/etc/openmpi/openmpi-mca-params.conf").exists(),
                                reason="Open MPI not installed")


@needs_ompi
def test_openmpi_debian_pml_exclusion_warns_with_rdma() -> None:
    out = {f.id: f for f in run(ctx(fx("mlx5-roce-ndr")), "openmpi")}
    text = Path("/etc/openmpi/openmpi-mca-params.conf").read_text()
    if "pml = ^ucx" in text:
        assert out["openmpi.pml"].severity == "warn"
        assert "openmpi-mca-params.conf:" in out["openmpi.pml"].evidence
        assert "OMPI_MCA_pml=ucx" in out["openmpi.pml"].fix


@needs_ompi
def test_openmpi_env_overrides_file_ok() -> None:
    out = {f.id: f for f in run(ctx(fx("mlx5-roce-ndr"), env={"OMPI_MCA_pml": "ucx"}), "openmpi")}
    assert out["openmpi.pml"].severity == "info" and "forced to ucx" in out["openmpi.pml"].title
    assert "environment OMPI_MCA_pml" in out["openmpi.pml"].evidence


@needs_ompi
def test_openmpi_ucx_net_devices_without_pml_ucx_devices_any() -> None:
    out = {f.id: f for f in run(ctx(env={"UCX_NET_DEVICES": "eth0"}), "openmpi")}
    assert out["openmpi.ucx_devices"].severity == "warn"
    assert "pml_ucx_devices any" in out["openmpi.ucx_devices"].fix
    ok = {f.id: f for f in run(ctx(env={"UCX_NET_DEVICES": "eth0", "OMPI_MCA_pml_ucx_devices": "any"}), "openmpi")}
    assert ok["openmpi.ucx_devices"].severity == "ok"


@needs_ompi
def test_openmpi_4x_openib_on_ib_port_needs_allow_ib() -> None:
    env = {"OMPI_MCA_btl": "openib,self,vader"}
    out = {f.id: f for f in run(ctx(fx("ib-with-sm"), env=env), "openmpi")}
    assert out["openmpi.openib"].severity == "warn" and "btl_openib_allow_ib" in out["openmpi.openib"].fix
    env["OMPI_MCA_btl_openib_allow_ib"] = "1"
    out = {f.id: f for f in run(ctx(fx("ib-with-sm"), env=env), "openmpi")}
    assert out["openmpi.openib"].severity == "ok"


def test_openmpi_5x_openib_requested_error_fake_ompi_info(tmp_path: Path) -> None:
    # Open MPI 5 is not installed here; a fake ompi_info prints its version line.
    runner = CommandRunner({"ompi_info": fake_cmd(tmp_path, "ompi5", "ompi:version:full:5.0.3\n"
                                                  "mca:pml:ucx:version:\"component:5.0.3\"")})
    etc = tmp_path / "etc"
    write(etc / "openmpi/openmpi-mca-params.conf", "btl = openib,self\n")
    out = {f.id: f for f in run(ctx(fx("ib-with-sm"), runner=runner, etc_root=etc), "openmpi")}
    assert out["openmpi.openib"].severity == "error" and "removed in 5.0" in out["openmpi.openib"].title


# ---------------------------------------------------------------- ofi (this host's real libfabric)


def _needs_ofi() -> None:
    if not live_inventory().ofi.ok:
        pytest.skip(f"engine without libfabric: {live_inventory().ofi.describe('libfabric')}")


def test_ofi_providers_listed_and_bad_fi_provider() -> None:
    _needs_ofi()
    out = {f.id: f for f in run(ctx(env={"FI_PROVIDER": "tcp"}), "ofi")}
    assert out["ofi.provider"].severity == "ok" and "tcp" in out["ofi.providers"].title
    bad = {f.id: f for f in run(ctx(env={"FI_PROVIDER": "verbz"}), "ofi")}
    assert bad["ofi.provider"].severity == "error" and "verbz" in bad["ofi.provider"].title


def test_ofi_no_verbs_with_rdma_device_warns() -> None:
    _needs_ofi()
    if "verbs" not in live_inventory().ofi.provider_names:
        out = {f.id: f.severity for f in run(ctx(fx("mlx5-roce-ndr")), "ofi")}
        assert out["ofi.verbs"] == "warn"


def test_ofi_a_provider_fi_info_lists_but_provider_refuses_is_not_offered() -> None:
    # `fi_info -l` names utility providers (ofi_rxm) that --provider refuses on their own; the
    # doctor's list is the engine's, so FI_PROVIDER=ofi_rxm is reported, not waved through.
    _needs_ofi()
    assert "ofi_rxm" not in live_inventory().ofi.provider_names
    out = {f.id: f for f in run(ctx(env={"FI_PROVIDER": "ofi_rxm"}), "ofi")}
    assert out["ofi.provider"].severity == "error" and "ofi_rxm" in out["ofi.provider"].title


# ---------------------------------------------------------------- cross-host


def test_collect_host_facts_real_and_json() -> None:
    facts = collect_host_facts(ctx())
    json.dumps(facts)
    assert facts["schema"] == "fabscope.hostfacts/1"
    assert facts["kernel"] == os.uname().release
    if live_inventory().ucx.ok:
        assert facts["ucx"] and facts["ucx"][0].isdigit()
    if live_inventory().ofi.ok:
        assert facts["libfabric"] and facts["libfabric"][0].isdigit()
    if shutil.which("ompi_info"):
        assert facts["openmpi"] and facts["openmpi"][0].isdigit()
    assert "lo" not in facts["netdev_mtus"]


def test_compare_hosts_same_ok_and_differences_flagged() -> None:
    local = collect_host_facts(ctx())
    assert {f.severity for f in compare_hosts(local, local)} == {"ok"}
    peer = dict(local, hostname="peer", openmpi="4.1.6", ucx="1.16.0",
                netdev_mtus={**local["netdev_mtus"], "eth0": 9000})
    out = {f.id: f for f in compare_hosts(HostFacts.from_dict(local), peer)}
    if local["openmpi"]:
        assert out["crosshost.openmpi"].severity == "error"
    assert out["crosshost.ucx"].severity == "warn"
    if "eth0" in local["netdev_mtus"] and local["netdev_mtus"]["eth0"] != 9000:
        assert out["crosshost.mtu.eth0"].severity == "warn"


# ---------------------------------------------------------------- whole run, CLI, robustness


def test_live_run_no_rdma_says_so_and_checks_the_rest() -> None:
    report = run_doctor(ctx())
    ids = {f.id: f for f in report.findings}
    if not Path("/sys/class/infiniband").exists():
        assert ids["rdma.devices"].severity == "info"
    if Path("/sys/devices/system/cpu/cpuidle/current_driver").read_text().strip() == "haltpoll":
        assert ids["cpu.idle.haltpoll"].severity == "warn"
        assert report.exit_code == 1 or report.worst == "error"
    for area in ("memlock", "cpu", "net", "firewall", "ucx", "openmpi", "ofi"):
        assert any(f.id.startswith(area) for f in report.findings), area
    data = json.loads(report.to_json())
    assert data["schema"] == "fabscope.doctor/1" and data["exit_code"] == report.exit_code
    for f in data["findings"]:
        assert set(f) == {"id", "severity", "title", "evidence", "why", "fix"}
        assert f["severity"] in ("ok", "info", "warn", "error")


def test_main_doctor_exit_codes(capsys: pytest.CaptureFixture[str]) -> None:
    code = main_doctor(["--json", "--sysfs-root", str(fx("ib-no-sm"))])
    data = json.loads(capsys.readouterr().out)
    assert code == 7 and data["worst"] == "error"
    assert main_doctor(["--bogus"]) == 2  # usage
    assert main_doctor(["--peer", "127.0.0.1:1"]) == 3  # nothing serves there
    err = capsys.readouterr().err
    assert "unrecognized arguments: " in err and "--bogus" in err  # (quoted or not)
    assert "fabscope serve" in err and "Traceback" not in err


def test_text_renderer_has_table_and_fixes() -> None:
    from fabscope.doctor import render_text
    text = render_text(run_doctor(ctx(fx("ib-no-sm")), checks=["ports.sm", "ports.pcie"]))
    assert "severity" in text and "ERROR" in text and "fix:" in text and "exit status 7" in text


def test_a_crashing_check_becomes_an_error_finding() -> None:
    @check("zz.test_crash", "zz")
    def boom(c: Context) -> list[Finding]:
        raise RuntimeError("kaboom")

    try:
        out = run_checks(ctx(fx("host-no-rdma")), ["zz.test_crash"])
        assert out[0].id == "zz.test_crash.internal" and out[0].severity == "error"
        assert "kaboom" in out[0].evidence
    finally:
        del CHECKS["zz.test_crash"]


def test_every_registered_check_runs_on_every_real_layout_without_crashing() -> None:
    """Each check on each copied host layout (a check that does not apply says nothing); none
    ends in the runner's crash finding (an exception inside a check)."""
    names = sorted(CHECKS)
    for layout in sorted(p for p in FIX.iterdir() if p.is_dir()):
        root = layout / "sys" if (layout / "sys").is_dir() else layout
        findings = run_checks(ctx(root), names)
        crashed = [f"{f.id}: {f.evidence}" for f in findings if f.id.endswith(".internal")]
        assert not crashed, (layout.name, crashed)
        assert findings, layout.name
