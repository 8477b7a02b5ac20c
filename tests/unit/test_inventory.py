# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope-engine --inventory-json` on this host (no RDMA device; real UCX and libfabric), its
reader, the fixtures, and the promise that what the doctor lists is what the run options
accept: every listed name is tried with the engine's own validation."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from fabscope.doctor import CHECKS, Context, Finding
from fabscope.inventory import SCHEMA, EngineInventory, InventoryError, load, query
from fabscope.launch.engine import engine_path

INV = Path(__file__).resolve().parents[1] / "fixtures" / "inventory"
SYSFS = Path(__file__).resolve().parents[1] / "fixtures" / "sysfs"
EXIT_USAGE, EXIT_PEER = 2, 3


@pytest.fixture(scope="module")
def raw() -> dict[str, object]:
    out = subprocess.run([str(engine_path()), "--inventory-json"], capture_output=True, text=True,
                         timeout=60, check=True)
    data: dict[str, object] = json.loads(out.stdout)
    return data


@pytest.fixture(scope="module")
def inv() -> EngineInventory:
    return query()


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def validate(*args: str) -> tuple[int, str]:
    """The engine's validation of a run with these options: exit 2 = refused; valid options get
    as far as connecting to a port where nothing listens (exit 3)."""
    proc = subprocess.run([str(engine_path()), *args, "--peer", f"127.0.0.1:{closed_port()}",
                           "--timeout", "0.1"], capture_output=True, text=True, timeout=60, check=False)
    return proc.returncode, proc.stderr


def doctor(env: dict[str, str], name: str) -> list[Finding]:
    return CHECKS[name].fn(Context(env=env))


def accepted_list(finding: Finding, option: str) -> list[str]:
    """The names a finding's evidence says `option` accepts."""
    # Sentences are separated by "; " (layered provider names have a ";" without the space).
    m = re.search(rf"{re.escape(option)} accepts: (.*?)(?:; |$)", finding.evidence)
    assert m, f"{finding.id} does not say what {option} accepts: {finding.evidence}"
    return [n.strip() for n in m.group(1).split(", ") if n.strip()]


# ------------------------------------------------------------------ the engine's output here


def test_engine_inventory_is_schema_versioned_and_verbs_is_empty_but_valid(
        raw: dict[str, object], inv: EngineInventory) -> None:
    assert raw["schema"] == SCHEMA == "fabscope.inventory/1"
    assert raw["host"] == socket.gethostname()
    verbs = raw["verbs"]
    assert isinstance(verbs, dict) and verbs["status"] == "ok"
    if not Path("/sys/class/infiniband").exists():
        assert verbs["devices"] == [] and inv.verbs.devices == ()
        assert "ibv_get_device_list" in str(verbs.get("note"))
    assert inv.source.endswith("--inventory-json")


def test_ucx_part_is_what_ucx_itself_lists(inv: EngineInventory) -> None:
    if not inv.ucx.ok:
        pytest.skip(inv.ucx.describe("UCX"))
    assert {"self", "tcp"} <= set(inv.ucx.transports)
    assert "lo" in inv.ucx.net_devices
    assert {r.device_type for r in inv.ucx.resources} <= {"net", "shm", "acc", "self"}
    # --ucx-tls takes every transport, "all" and the aliases with a member present.
    assert set(inv.ucx.tls_names) == {"all", *inv.ucx.transports, *inv.ucx.available_aliases}
    for alias, members in inv.ucx.aliases.items():
        assert (alias in inv.ucx.available_aliases) == bool(set(members) & set(inv.ucx.transports))
    assert inv.ucx.aliases["sm"] == ("posix", "sysv", "xpmem", "knem", "cma")
    assert inv.ucx.aliases_source and "ucx_resources.c" in inv.ucx.aliases_source
    if shutil.which("ucx_info"):  # an independent reader of the same library agrees
        text = subprocess.run(["ucx_info", "-d"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
        assert set(re.findall(r"#\s+Transport:\s+(\S+)", text)) == set(inv.ucx.transports)


def test_libfabric_part_is_what_fi_getinfo_lists(inv: EngineInventory) -> None:
    if not inv.ofi.ok:
        pytest.skip(inv.ofi.describe("libfabric"))
    names = {p.name for p in inv.ofi.providers}
    assert {"tcp", "shm"} <= names
    shm = next(p for p in inv.ofi.providers if p.name == "shm")
    assert "rdm" in shm.endpoint_types and shm.domains == ("shm",)
    # --provider takes every listed provider and the core name of each layered one.
    cores = {n.split(";", 1)[0] for n in names}
    assert set(inv.ofi.provider_names) == names | cores
    if shutil.which("fi_info"):
        text = subprocess.run(["fi_info"], capture_output=True, text=True, timeout=60, check=True).stdout
        assert set(re.findall(r"^provider:\s*(\S+)", text, re.M)) == names


def test_only_inventory_json_pays_for_libfabric() -> None:
    # The engine opens libfabric lazily: --list-backends must not load it (its PSM provider's
    # constructor costs 0.1-0.2 s in every process that maps it).
    out = subprocess.run(["env", "LD_DEBUG=files", str(engine_path()), "--list-backends"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert "libfabric.so" not in out.stderr
    out = subprocess.run(["env", "LD_DEBUG=files", str(engine_path()), "--inventory-json"],
                         capture_output=True, text=True, timeout=60, check=True)
    assert "libfabric.so" in out.stderr


# ------------------------------------------------------------------ the doctor lists = the options accept


def test_every_ucx_transport_the_doctor_lists_is_accepted_by_ucx_tls(inv: EngineInventory) -> None:
    if not inv.ucx.ok:
        pytest.skip(inv.ucx.describe("UCX"))
    (f,) = doctor({}, "ucx")
    listed = accepted_list(f, "--ucx-tls")
    assert set(listed) == set(inv.ucx.tls_names)
    for name in listed:
        rc, err = validate("--backend", "ucx", "--ucx-tls", name)
        assert rc == EXIT_PEER, f"--ucx-tls {name} listed by the doctor but refused: {err}"
    for name in ("tpc", *(a for a in inv.ucx.aliases if a not in listed)):
        rc, err = validate("--backend", "ucx", "--ucx-tls", name)
        assert rc == EXIT_USAGE and f"'{name}'" in err, (name, err)


def test_every_ucx_device_the_doctor_lists_is_accepted_by_device(inv: EngineInventory) -> None:
    if not inv.ucx.ok:
        pytest.skip(inv.ucx.describe("UCX"))
    (f,) = doctor({}, "ucx")
    listed = accepted_list(f, "--device")
    assert set(listed) == {"all", *inv.ucx.net_devices}
    for name in listed:
        if name != "all" and not Path(f"/sys/class/net/{name}").exists():
            continue  # another test's namespace link went away since the inventory was taken
        rc, err = validate("--backend", "ucx", "--device", name)
        assert rc == EXIT_PEER, f"--device {name} listed by the doctor but refused: {err}"
    rc, err = validate("--backend", "ucx", "--device", "mlx5_9:1")
    assert rc == EXIT_USAGE and "mlx5_9:1" in err


def test_every_provider_the_doctor_lists_is_accepted_by_provider(inv: EngineInventory) -> None:
    if not inv.ofi.ok:
        pytest.skip(inv.ofi.describe("libfabric"))
    (f,) = [x for x in doctor({}, "ofi") if x.id == "ofi.providers"]
    listed = accepted_list(f, "--provider")
    assert set(listed) == set(inv.ofi.provider_names)
    for name in listed:
        rc, err = validate("--backend", "ofi", "--provider", name)
        assert rc == EXIT_PEER, f"--provider {name} listed by the doctor but refused: {err}"
    # The domains listed with each provider are what --domain accepts with it.
    for prov in inv.ofi.providers:
        dom = next((x for x in prov.domains if x == "shm" or Path(f"/sys/class/net/{x}").exists()), None)
        if dom is not None:
            rc, err = validate("--backend", "ofi", "--provider", prov.name, "--domain", dom)
            assert rc == EXIT_PEER, f"--provider {prov.name} --domain {dom} refused: {err}"
    # What `fi_info -l` names but --provider refuses is not in the doctor's list either.
    if shutil.which("fi_info"):
        text = subprocess.run(["fi_info", "-l"], capture_output=True, text=True, timeout=60,
                              check=True).stdout
        extra = [n for n in re.findall(r"^([A-Za-z0-9_;]+):\s*$", text, re.M) if n not in listed]
        assert extra, "fi_info -l lists nothing beyond the accepted providers here"
        for name in extra[:3]:
            rc, err = validate("--backend", "ofi", "--provider", name)
            assert rc == EXIT_USAGE and f"--provider {name}" in err, (name, err)


def test_fi_provider_does_not_hide_the_others_from_the_doctor() -> None:
    inv = query(env={"FI_PROVIDER": "tcp", "PATH": "/usr/bin:/bin"})
    if not inv.ofi.ok:
        pytest.skip(inv.ofi.describe("libfabric"))
    assert "shm" in inv.ofi.provider_names and inv.ofi.fi_provider_env is None


# ------------------------------------------------------------------ the reader and the fixtures


def test_every_fixture_loads_matches_a_sysfs_fixture_and_is_documented() -> None:
    readme = (INV / "README.md").read_text()
    files = sorted(INV.glob("*.json"))
    assert len(files) >= 8
    for path in files:
        inv = load(path)
        assert inv.verbs.ok and inv.verbs.devices, path
        assert f"`{path.name}`" in readme, f"{path.name} not described in README.md"
        sysfs = SYSFS / path.stem
        if path.stem != "siw-qemu":
            assert sysfs.is_dir(), f"{path.name} has no sysfs fixture of the same host"
            root = sysfs / "sys" if (sysfs / "sys").is_dir() else sysfs
            names = {d.name for d in (root / "class" / "infiniband").iterdir()}
            assert names == {d.name for d in inv.verbs.devices}, path


def test_captured_guest_inventory_rxe_roce_v2() -> None:
    inv = load(INV / "rxe-qemu.json")
    dev = inv.verbs.device("rxe0")
    assert dev is not None and dev.transport == "InfiniBand" and dev.node_type == "CA"
    port = dev.port(1)
    assert port is not None and port.state == "ACTIVE" and port.link_layer == "Ethernet"
    assert (port.active_mtu, port.max_mtu) == (1024, 4096) and port.netdev == "eth0"
    v2 = [g for g in port.gids if g.type == "RoCE v2" and g.ipv4]
    assert [(g.index, g.ipv4, g.netdev) for g in v2] == [(1, "192.168.77.2", "eth0")]
    # The same GID the kernel shows in the sysfs capture of that guest.
    gid1 = (SYSFS / "rxe-qemu/sys/class/infiniband/rxe0/ports/1/gids/1").read_text().strip()
    assert v2[0].gid == gid1
    assert "rxe0:1" in inv.ucx.net_devices and "rc_verbs" in inv.ucx.transports
    assert "verbs" in inv.ofi.provider_names


def test_captured_siw_netdev_found_by_mac() -> None:
    raw = json.loads((INV / "siw-qemu.json").read_text())
    port = raw["verbs"]["devices"][0]["ports"][0]
    assert raw["verbs"]["devices"][0]["transport"] == "iWARP"
    assert port["netdev"] == "eth0" and port["netdev_source"] == "MAC in GID 0"


def test_reader_refuses_wrong_schema_and_types(tmp_path: Path) -> None:
    with pytest.raises(InventoryError, match="schema"):
        EngineInventory.from_dict({"schema": "fabscope.devices/1"}, "t")
    data = json.loads((INV / "rxe-qemu.json").read_text())
    data["ucx"]["status"] = "maybe"
    with pytest.raises(InventoryError, match=r"ucx\.status"):
        EngineInventory.from_dict(data, "t")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(InventoryError, match="not readable as JSON"):
        load(bad)


def test_query_without_engine_is_unavailable_not_a_traceback(monkeypatch: pytest.MonkeyPatch,
                                                            tmp_path: Path) -> None:
    monkeypatch.setenv("FABSCOPE_ENGINE", str(tmp_path / "no-such-engine"))
    inv = query()
    assert not inv.verbs.ok and not inv.ucx.ok and not inv.ofi.ok
    assert inv.ucx.problem and "FABSCOPE_ENGINE" in inv.ucx.problem
    (f,) = CHECKS["ucx"].fn(Context(env={}, engine_inventory_override=inv))
    assert f.severity == "info" and "unavailable" in f.title and "FABSCOPE_ENGINE" in f.evidence
