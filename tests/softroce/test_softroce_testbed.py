# SPDX-License-Identifier: BSD-3-Clause
"""The Soft-RoCE testbed, for real: qemu guests with a kernel rxe device.

Boots its guests one run at a time (single-guest runs for the device checks and the
exit status, one that must time out, two-guest pairs for perftest and --pin-cpus), after
building the image once (about a minute; cached in
${FABSCOPE_CACHE:-/var/cache/fabscope}/softroce). The tests at the bottom need
no guest.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO / "python") not in sys.path:  # no conftest needed: PYTHONPATH=python also works
    sys.path.insert(0, str(REPO / "python"))

from fabscope.testbed import softroce, softroce_guests  # noqa: E402

GID = "/sys/class/infiniband/rxe0/ports/1"
# In the client guest: waits for the server guest's listener before a peer tool's client starts
AWAIT = "sh /fabscope/tests/softroce/await_listener.sh"


@pytest.fixture(scope="module")
def built() -> Path:
    reason = softroce.why_it_cannot_boot()
    if reason:
        pytest.skip(reason)
    t0 = time.monotonic()
    path = softroce.build()
    print(f"\nsoftroce image {path} ready in {time.monotonic() - t0:.1f} s")
    return path


@pytest.mark.softroce
@pytest.mark.two_at_once  # times nothing
@pytest.mark.xdist_group("guest")
def test_single_guest_rxe_device_and_exit_status(
    built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """One boot: rxe0 is a real verbs device, fabscope is on PATH, /out is
    shared back, and the command's exit status (7) comes out of `run` via the CLI."""
    script = f"""
ibv_devices
ibv_devinfo -d rxe0
# gids/1 and its type in one pass: reading the GID table file by file is slow under TCG
cat {GID}/gids/1 {GID}/gid_attrs/types/1
command -v fabscope; command -v fabscope-engine
test -r /fabscope/python/fabscope/__init__.py && echo repo-visible
echo hello-from-guest > /out/hello.txt
grep -q 'peer' /etc/hosts && echo hosts-has-peer
exit 7
"""
    t0 = time.monotonic()
    rc = softroce.main(["run", "--timeout", "180", "--out", str(tmp_path), "--", "sh", "-c", script])
    elapsed = time.monotonic() - t0
    out = capsys.readouterr().out
    print(out)
    print(f"single-guest run: {elapsed:.1f} s")
    assert rc == 7, out
    assert re.search(r"^\s*rxe0\s+[0-9a-f]{16}\s*$", out, re.M), "ibv_devices does not list rxe0"
    assert re.search(r"state:\s+PORT_ACTIVE \(4\)", out), "rxe0 port 1 is not PORT_ACTIVE"
    assert "link_layer:\t\tEthernet" in out
    # RoCE v2 GID of 192.168.77.1 at index 1 (the IPv4-mapped address).
    assert "0000:0000:0000:0000:0000:ffff:c0a8:4d01\nRoCE v2" in out
    assert "/usr/local/bin/fabscope\n/usr/local/bin/fabscope-engine" in out
    assert "repo-visible" in out and "hosts-has-peer" in out
    assert (tmp_path / "hello.txt").read_text() == "hello-from-guest\n"


@pytest.mark.softroce
@pytest.mark.two_at_once  # times nothing but its own deadline
@pytest.mark.xdist_group("build")
def test_timeout_kills_the_guest(built: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    timeout = 18.0  # a single guest starts its command ~8 s after qemu does
    # A failed run keeps its consoles for the user: here they go to the test's own directory.
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    t0 = time.monotonic()
    with pytest.raises(softroce.SoftRoceTimeout) as info:
        softroce.run(["sh", "-c", "echo about-to-hang; sleep 100000"], timeout_s=timeout, stdout=io.StringIO())
    elapsed = time.monotonic() - t0
    msg = str(info.value)
    print(msg)
    assert elapsed < timeout + 15, f"took {elapsed:.1f} s for a {timeout} s timeout"
    assert "did not finish within the 18 s timeout" in msg
    assert "sleep 100000" in msg  # names the command
    assert "about-to-hang" in msg  # and shows the console's last lines
    assert info.value.exit_status == 124
    assert f"consoles and qemu logs kept in {tmp_path}" in msg


def _qemu_children() -> dict[str, set[str]]:
    """guest name -> the CPU lists its qemu's threads may run on (children of this process)."""
    seen: dict[str, set[str]] = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        ppid = re.search(r"^PPid:\s*(\d+)", status, re.M)
        if not ppid or int(ppid[1]) != os.getpid() or "qemu-system" not in cmdline:
            continue
        guest = "server" if "/server," in cmdline else "client" if "/client," in cmdline else "?"
        for task in Path(f"/proc/{pid}/task").iterdir():
            try:
                allowed = re.search(r"^Cpus_allowed_list:\s*(\S+)", (task / "status").read_text(), re.M)
            except OSError:
                continue
            if allowed:
                seen.setdefault(guest, set()).add(allowed[1])
    return seen


@pytest.mark.softroce
def test_two_guests_ib_write_bw_each_guest_pinned_to_a_host_cpu(built: Path) -> None:
    """perftest across the guests' datagram link: server guest <-> client guest. In the same boot
    (boots are the slow part under TCG), --pin-cpus: every thread of the server guest's qemu on the
    first CPU this process may use, every thread of the client's on the second (read from /proc
    while the guests run)."""
    cpus = sorted(os.sched_getaffinity(0))
    pin = len(cpus) >= 2
    seen: dict[str, set[str]] = {}
    stop = threading.Event()

    def watch() -> None:
        while not stop.is_set():
            for guest, lists in _qemu_children().items():
                seen.setdefault(guest, set()).update(lists)
            stop.wait(0.5)

    perf = ["ib_write_bw", "-d", "rxe0", "-x", "1", "-F", "-n", "200", "-s", "65536"]
    out, err = io.StringIO(), io.StringIO()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t0 = time.monotonic()
    try:
        # the testbed starts the client once the server's perftest listens (its TCP port, 18515)
        rc = softroce.run([*perf, "peer"],
                          two_guests=True, pin_cpus=pin, timeout_s=240, server_cmd=perf,
                          stdout=out, stderr=err)
    finally:
        stop.set()
        watcher.join(timeout=10)
    elapsed = time.monotonic() - t0
    print(out.getvalue())
    print(err.getvalue())
    print(f"two-guest run: {elapsed:.1f} s")
    assert rc == 0
    text = out.getvalue()
    # Client and server GIDs are the two guests' IPv4-mapped addresses.
    assert "GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:77:02" in text
    assert "GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:168:77:01" in text
    m = re.search(r"^\s*65536\s+200\s+([\d.]+)\s+([\d.]+)", text, re.M)
    assert m, "no ib_write_bw result line"
    # The 200 writes completed (exit 0, the result line): the link carried them. The figure is
    # perftest's, timed with a cycle counter it first fits against the clock; under TCG that fit
    # sometimes fails ("Correlation coefficient r^2: 0.09 < 0.9", seen in CI) and it prints 0.00.
    assert float(m[2]) > 0 or "Correlation coefficient r^2" in text, text
    assert "[server]" in err.getvalue()  # the server's output is forwarded, marked
    if not pin:
        pytest.skip(f"pinning not checked: this process may use only CPU {cpus[0]}")
    assert seen == {"server": {str(cpus[0])}, "client": {str(cpus[1])}}, seen


def test_pin_cpus_needs_two_guests() -> None:
    with pytest.raises(softroce.SoftRoceError, match=r"add --two-guests \(two_guests\)"):
        softroce.run(["true"], pin_cpus=True)
    p = subprocess.run([sys.executable, "-m", "fabscope.testbed.softroce", "run", "--pin-cpus", "--", "true"],
                       capture_output=True, text=True, env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and "add --two-guests" in p.stderr, p.stderr


# ---------------------------------------------------------------------------
# No guest needed.


def test_vcpus_is_for_a_single_guest() -> None:
    for kwargs in ({"two_guests": True}, {"numa": True}):
        with pytest.raises(softroce.SoftRoceError, match=r"vcpus=2\) is for a single guest"):
            softroce.run(["true"], vcpus=2, **kwargs)  # type: ignore[arg-type]
    with pytest.raises(softroce.SoftRoceError, match="must be 1 or 2, got 3"):
        softroce.run(["true"], vcpus=3)
    p = subprocess.run([sys.executable, "-m", "fabscope.testbed.softroce", "run", "--vcpus", "2", "--two-guests",
                        "--", "true"], capture_output=True, text=True,
                       env={"PYTHONPATH": str(REPO / "python"), "PATH": "/usr/bin:/bin"})
    assert p.returncode == 2 and "--vcpus 2 (vcpus=2) is for a single guest" in p.stderr, p.stderr


def test_debian_mirror_from_deb822_and_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("FABSCOPE_DEBIAN_MIRROR", raising=False)
    apt = tmp_path / "apt"
    (apt / "sources.list.d").mkdir(parents=True)
    assert softroce.debian_mirror(apt) == softroce.DEFAULT_MIRROR
    (apt / "sources.list.d" / "debian.sources").write_text(
        "Types: deb\nURIs: http://mirror.example/debian-security\nSuites: bookworm-security\n\n"
        "Types: deb\n# comment\nURIs: http://mirror.example/debian/\nSuites: bookworm bookworm-updates\n"
    )
    assert softroce.debian_mirror(apt) == "http://mirror.example/debian"
    (apt / "sources.list").write_text("deb [arch=amd64] http://other.example/debian bookworm main\n")
    assert softroce.debian_mirror(apt) == "http://other.example/debian"
    monkeypatch.setenv("FABSCOPE_DEBIAN_MIRROR", "http://env.example/debian/")
    assert softroce.debian_mirror(apt) == "http://env.example/debian"


def test_recipe_key_is_stable_and_hex() -> None:
    assert softroce.recipe_key() == softroce.recipe_key()
    assert re.fullmatch(r"[0-9a-f]{16}", softroce.recipe_key())


def test_run_without_command_explains(capsys: pytest.CaptureFixture[str]) -> None:
    assert softroce.main(["run", "--"]) == 125
    assert "no command given" in capsys.readouterr().err


def test_control_dir_quotes_argv_exactly(tmp_path: Path) -> None:
    argv = ["printf", "%s|", "a b", "it's", "$HOME", "*"]
    softroce_guests._write_control_dir(
        tmp_path / "ctl", nonce="00", role="single", addr="192.168.77.1", peer="192.168.77.1",
        hosts="", cmd=argv, rdma="rxe", wait_go=False, keep_alive=False, go_timeout_s=10,
        siw_ko=None, extra_files={},
    )
    sh = shutil.which("sh")
    assert sh
    got = subprocess.run([sh, str(tmp_path / "ctl" / "cmd.sh")], capture_output=True, text=True, check=True)
    assert got.stdout == "a b|it's|$HOME|*|"
    env = (tmp_path / "ctl" / "env").read_text()
    assert "FS_RDMA=rxe\n" in env and "FS_NONCE=00\n" in env


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="ssh-keygen (openssh-client) missing")
def test_two_guest_ssh_key_is_per_run_and_owner_only(tmp_path: Path) -> None:
    """The key pair the guests' launcher uses: made fresh per run dir, the private half 0600 (it is
    copied into the control shares with its mode, and ssh refuses a key others can read)."""
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    ka, kb = softroce_guests._ssh_key_pair(a), softroce_guests._ssh_key_pair(b)
    assert set(ka) == {"ssh_key", "ssh_key.pub"}
    assert (ka["ssh_key"].stat().st_mode & 0o077) == 0
    assert ka["ssh_key.pub"].read_text().startswith("ssh-ed25519 ")
    assert ka["ssh_key.pub"].read_text() != kb["ssh_key.pub"].read_text()
    softroce_guests._write_control_dir(
        tmp_path / "ctl", nonce="00", role="client", addr="192.168.77.2", peer="192.168.77.1",
        hosts="", cmd=["true"], rdma="rxe", wait_go=False, keep_alive=False, go_timeout_s=10,
        siw_ko=None, extra_files=ka,
    )
    assert ((tmp_path / "ctl" / "ssh_key").stat().st_mode & 0o077) == 0


@pytest.mark.softroce
def test_fabscope_itself_in_the_guest(tmp_path: Path) -> None:
    """What a user does with `fabscope testbed softroce run -- ...`: the same fabscope and engine
    as on the host, on a real verbs device. The guest has two NUMA nodes with its NIC on node 1
    (--numa): --cpu auto, the default, puts both engines on node 1 and the placement is clear;
    --cpu far puts them on node 0 and the explanation names placement."""
    verbs = "fabscope run --loopback --backend verbs --device rxe0 --iters 200"
    script = (
        "fabscope devices --json > /out/devices.json; "
        "fabscope doctor --json > /out/doctor.json; "
        f"{verbs} --sizes 8,4K --format json > /out/run.jsonl; echo run=$? > /out/run.rc; "
        f"{verbs} --sizes 8 --format json --cpu far > /out/far.jsonl; echo far=$? > /out/far.rc; "
        f"{verbs} --sizes 8 --cpu far --no-store > /out/far.txt 2>&1; "
        f"{verbs} --pattern bw --sizes 64K --format json > /out/bw.jsonl; echo bw=$? > /out/bw.rc"
    )
    rc = softroce.run(["sh", "-c", script], out_dir=tmp_path, timeout_s=600, numa=True)
    assert rc == 0
    devices = json.loads((tmp_path / "devices.json").read_text())
    assert [d["name"] for d in devices["rdma_devices"]] == ["rxe0"]
    doctor = json.loads((tmp_path / "doctor.json").read_text())
    gid = next(f for f in doctor["findings"] if f["id"].startswith("gid.roce_v2"))
    assert "index 1" in gid["title"]
    numa = next(f for f in doctor["findings"] if f["id"] == "cpu.numa.rxe0")
    assert "NUMA node 1" in numa["title"], numa
    assert (tmp_path / "run.rc").read_text().strip() == "run=0"
    records = [json.loads(line) for line in (tmp_path / "run.jsonl").read_text().splitlines()]
    assert [r["size"] for r in records] == [8, 4096]
    for rec in records:
        local = rec["transport"]["local"]
        assert local["device"] == "rxe0" and local["gid"]["index"] == 1
        assert rec["latency_us"]["p50"] > 0
        # One guest: rxe loops its own traffic back and the peer address is local.
        assert rec["path"]["verdict"] == "unverifiable"
        # auto: each engine on a CPU of node 1 (CPUs 2-3), a different one each.
        for host in ("host", "peer_host"):
            place = rec[host]["placement"]
            assert place["asked"] == "auto" and place["device_numa_node"] == 1 and place["host_numa_nodes"] == 2
            assert place["device"] == "rxe0 (on eth0)", place
        assert {rec["cpu_use"][side]["cpu"] for side in ("local", "peer")} == {2, 3}
        assert {rec["cpu_use"][side]["numa_node"] for side in ("local", "peer")} == {1}
        cause = {c["cause"]: c for c in rec["explanation"]["causes"]}["placement"]
        assert cause["state"] == "clear", cause
    # far: node 0's CPUs, one each, named as the cause with both nodes (and nothing else seen).
    assert (tmp_path / "far.rc").read_text().strip() == "far=0"
    (far,) = [json.loads(line) for line in (tmp_path / "far.jsonl").read_text().splitlines()]
    assert {far["cpu_use"][side]["cpu"] for side in ("local", "peer")} == {0, 1}
    assert {far["cpu_use"][side]["numa_node"] for side in ("local", "peer")} == {0}
    assert [c["cause"] for c in far["explanation"]["causes"] if c["state"] == "seen"] == ["placement"]
    cause = {c["cause"]: c for c in far["explanation"]["causes"]}["placement"]
    assert cause["state"] == "seen" and "rxe0 (on eth0) is on node 1" in cause["evidence"], cause
    assert "--cpu auto" in cause["fix"]
    text = (tmp_path / "far.txt").read_text()
    assert "# why: placement: the local engine ran on CPU 1 (NUMA node 0)" in text, text
    assert "# cpu: local on CPU 1, NUMA node 0 (--cpu far; rxe0 (on eth0) on node 1)" in text, text
    # The expected ceiling: rxe0's link is eth0's, which announces 10 Gb/s (the testbed's virtio NIC
    # speed); RoCE v2 headers per 1024 B packet (rxe's active MTU at eth0's 1500) take their share.
    assert (tmp_path / "bw.rc").read_text().strip() == "bw=0"
    (bw,) = [json.loads(line) for line in (tmp_path / "bw.jsonl").read_text().splitlines()]
    local = bw["transport"]["local"]
    assert local["rate_gbps"] == 10 and "eth0" in local["rate_source"], local
    expected = bw["explanation"]["expected_gbps"]
    assert 8.5 < expected < 10 and "RoCE v2" in bw["explanation"]["expected_basis"], bw["explanation"]
    assert bw["explanation"]["achieved_fraction"] == pytest.approx(bw["bandwidth_gbps"] / expected, rel=1e-3)
    # Pause frames: the engine asks eth0's driver (virtio_net, behind rxe0) for its statistics; it
    # lists some, none of them pause or PFC counters, and the explanation says so.
    for side in ("local", "peer"):
        eth0 = bw["counters"][side]["net"]["eth0"]
        assert eth0["before"]["ethtool"] == {} and eth0["after"]["ethtool"] == {}, eth0
    assert "ethtool" not in bw["counters"]["local"]["net"]["lo"]["after"]  # no RDMA port behind lo
    # (rxe under TCG may resend a few hundred packets in a loopback bw run: the verdict is either.)
    ret = {c["cause"]: c for c in bw["explanation"]["causes"]}["retransmission"]
    assert ret["state"] in ("clear", "seen") and ret["evidence"].endswith(
        "; pause frames not counted on eth0 (softroce): the driver lists no pause statistics"), ret


def _tail(path: Path, chars: int = 3000) -> str:
    return path.read_text(errors="replace")[-chars:] if path.exists() else f"({path.name}: none)"


@pytest.mark.softroce
def test_fabscope_verbs_over_siw_iwarp(tmp_path: Path) -> None:
    """iWARP (siw) between two guests: perftest's ib_write_bw, then fabscope: send, write and read
    in lat and bw through rdma_cm; atomics are refused by the device (exit 6), never emulated; the
    counters say they cannot prove the path."""
    # First perftest over rdma_cm (its server half beside the serve, on a port of its own), then fabscope.
    perf = "ib_write_bw -d siw0 -R -F -n 100 -s 65536 -p 18600"
    loop = (
        f"{{ {AWAIT} peer cm:18600 300 && {perf} peer; }} > /out/perftest.txt 2>&1; echo $? > /out/perftest.rc; "
        "for op in send write read; do for pat in lat bw; do for try in 1 2; do "
        "fabscope run --peer peer --backend verbs --device siw0 --cm --op $op --pattern $pat "
        "--sizes 4K --iters 100 --timeout 60 --format json > /out/$op-$pat.jsonl 2>/out/$op-$pat.err; "
        "rc=$?; echo $rc > /out/$op-$pat.rc; "
        # siw's known read reset (see below) gets one more try; the first try's words are kept
        "if [ $rc -ne 0 ] && [ $try = 1 ] && [ $op-$pat = read-bw ] && grep -q 'status 5 (Work Request Flushed' "
        "/out/$op-$pat.err; then cp /out/$op-$pat.err /out/$op-$pat.first.err; sleep 1; else break; fi; "
        "done; done; done; "
        "fabscope run --peer peer --backend verbs --device siw0 --cm --op fadd --sizes 8 2>/out/fadd.err; "
        "echo $? > /out/fadd.rc"
    )
    rc = softroce.run(["sh", "-c", loop], two_guests=True, siw=True, out_dir=tmp_path, timeout_s=900,
                      server_cmd=["sh", "-c", f"{perf} & exec fabscope serve --bind 0.0.0.0 --insecure-no-auth "
                                  "2> /out/serve.log"])
    assert rc == 0
    client = tmp_path / "client"
    # iWARP: siw.ko built for the guest kernel, perftest over rdma_cm between the two guests
    perftest = (client / "perftest.txt").read_text()
    assert (client / "perftest.rc").read_text().strip() == "0", perftest
    assert "Transport type : IW" in perftest
    assert re.search(r"^\s*65536\s+100\s+[\d.]+\s+[\d.]+", perftest, re.M), "no ib_write_bw result line"
    # siw (Debian 6.1's, built here) now and then resets the connection under a window of RDMA reads: the
    # initiator's reads come back flushed (status 5). perftest's `ib_read_bw -R -s 4096 -t 64` does the
    # same ("Bad wc status -- 5"; 5 of 34 runs under TCG, fabscope 1 in 40-46), and the target's kernel may log its
    # own protocol error ("siw: [QP 1]: rreq with mpa len 46"); testbed/softroce/README.md. So read bw
    # alone gets a second try on that error, which must then pass; every other case gets one.
    first = client / "read-bw.first.err"
    if first.exists():
        print(f"read bw over siw needed a second try; the first: {first.read_text().strip()}")
    for op in ("send", "write", "read"):
        for pat in ("lat", "bw"):
            # The serve's log says how the server's engine ended
            assert (client / f"{op}-{pat}.rc").read_text().strip() == "0", (
                (client / f"{op}-{pat}.err").read_text(), _tail(tmp_path / "server" / "serve.log"))
            (rec,) = [json.loads(line) for line in (client / f"{op}-{pat}.jsonl").read_text().splitlines()]
            local = rec["transport"]["local"]
            assert local["device"] == "siw0" and local["gid"]["selection"].startswith("iWARP")
            if pat == "lat":
                assert rec["latency_us"]["p50"] > 0
            else:
                assert rec["bandwidth_gbps"] > 0
            assert rec["path"]["verdict"] == "unverifiable"
            assert "no traffic counters" in rec["path"]["summary"]
    assert (client / "fadd.rc").read_text().strip() == "6"
    assert "atomic" in (client / "fadd.err").read_text()
