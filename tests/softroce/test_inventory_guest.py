"""`fabscope-engine --inventory-json` and the doctor on a real verbs device: rdma_rxe in the
Soft-RoCE qemu guest.  One boot: inventory, doctor, the engine's validation of every listed
device name, then the netdev MTU raised to 9000 and everything asked again (the kernel's rxe
follows its netdev: active MTU 1024 -> 4096, and the doctor's MTU finding turns ok)."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:
    sys.path.insert(0, str(REPO / "python"))

from fabscope.inventory import EngineInventory  # noqa: E402
from fabscope.testbed import softroce  # noqa: E402

pytestmark = [
    pytest.mark.softroce,
    pytest.mark.skipif(shutil.which("qemu-system-x86_64") is None,
                       reason="the Soft-RoCE testbed needs qemu-system-x86_64 (package qemu-system-x86)"),
]

# The doctor runs from the repository the guest mounts at /fabscope (not through cli.py, so
# this test does not depend on the rest of the CLI).
DOCTOR = ("python3 -c 'import sys; sys.path.insert(0, \"/fabscope/python\"); "
          "from fabscope.doctor.cli_entry import main_doctor; sys.exit(main_doctor([\"--json\"]))'")

SCRIPT = f"""
fabscope-engine --inventory-json > /out/inv-1500.json
{DOCTOR} > /out/doctor-1500.json; echo $? > /out/doctor-1500.rc
for dev in rxe0 rxe9; do
  fabscope-engine --backend verbs --device $dev --peer 127.0.0.1:9 --timeout 0.1 2> /out/check-$dev.err
  echo $? > /out/check-$dev.rc
done
ip link set dev eth0 mtu 9000
fabscope-engine --inventory-json > /out/inv-9000.json
{DOCTOR} > /out/doctor-9000.json; echo $? > /out/doctor-9000.rc
exit 0
"""


@pytest.fixture(scope="module")
def out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = softroce.why_it_cannot_boot()
    if reason:
        pytest.skip(reason)
    softroce.build()
    d = tmp_path_factory.mktemp("inventory-guest")
    rc = softroce.main(["run", "--timeout", "300", "--out", str(d), "--", "sh", "-c", SCRIPT])
    assert rc == 0, f"guest script failed with {rc}; outputs: {sorted(p.name for p in d.iterdir())}"
    return d


def _inv(out: Path, name: str) -> EngineInventory:
    return EngineInventory.from_dict(json.loads((out / name).read_text()), source=name)


def _findings(out: Path, name: str) -> dict[str, dict[str, Any]]:
    report = json.loads((out / name).read_text())
    return {f["id"]: f for f in report["findings"]}


def test_guest_inventory_rxe0_with_its_roce_v2_gid(out: Path) -> None:
    inv = _inv(out, "inv-1500.json")
    assert inv.host == "softroce"
    dev = inv.verbs.device("rxe0")
    assert dev is not None and dev.node_type == "CA"
    port = dev.port(1)
    assert port is not None and port.state == "ACTIVE" and port.phys_state == "LinkUp"
    assert port.link_layer == "Ethernet" and port.netdev == "eth0"
    assert (port.active_mtu, port.max_mtu) == (1024, 4096)  # eth0 MTU 1500
    # rxe's port rate follows its netdev's speed: the testbed's NIC announces 10 Gb/s (without a
    # speed, rxe reports 2.5 Gb/s, 1X SDR).
    assert port.rate == "10 Gb/sec (1X FDR10)" and port.rate_gbps == 10.0
    v2 = [g for g in port.gids if g.type == "RoCE v2" and g.ipv4]
    assert [g.ipv4 for g in v2] == ["192.168.77.1"] and v2[0].netdev == "eth0"
    # UCX and libfabric see the device too, under their own names.
    assert "rxe0:1" in inv.ucx.net_devices and {"rc_verbs", "ud_verbs"} <= set(inv.ucx.transports)
    assert "rc" in inv.ucx.tls_names and "verbs" in inv.ofi.provider_names


def test_guest_device_names_listed_are_the_ones_verbs_accepts(out: Path) -> None:
    assert (out / "check-rxe0.rc").read_text().strip() == "3"  # valid: got as far as connecting
    assert (out / "check-rxe9.rc").read_text().strip() == "2"
    err = (out / "check-rxe9.err").read_text()
    assert "--device 'rxe9': no such RDMA device" in err and "rxe0 (port 1: ACTIVE" in err


def test_guest_doctor_mtu_fix_follows_the_netdev(out: Path) -> None:
    before = _findings(out, "doctor-1500.json")["ports.mtu.rxe0/1"]
    assert before["severity"] == "warn" and "netdev eth0 MTU 1500 limits RoCE to 1024" in before["title"]
    assert "`ip link set dev eth0 mtu 9000`" in before["fix"]
    assert "ibv_query_port" in before["evidence"]
    port = _inv(out, "inv-9000.json").verbs.devices[0].ports[0]
    assert (port.active_mtu, port.max_mtu) == (4096, 4096)
    after = _findings(out, "doctor-9000.json")["ports.mtu.rxe0/1"]
    assert after["severity"] == "ok" and "4096" in after["title"]


def test_guest_doctor_lists_what_the_options_accept(out: Path) -> None:
    inv = _inv(out, "inv-1500.json")
    found = _findings(out, "doctor-1500.json")
    assert f"--provider accepts: {', '.join(inv.ofi.provider_names)}" in found["ofi.providers"]["evidence"]
    assert f"--ucx-tls accepts: {', '.join(inv.ucx.tls_names)}" in found["ucx"]["evidence"]
    assert found["gid.roce_v2.rxe0/1"]["severity"] in ("ok", "warn")
