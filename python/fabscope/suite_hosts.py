# SPDX-License-Identifier: BSD-3-Clause
"""The two-host comparison suite: `fabscope suite --peer HOST` (against `fabscope serve` there) and
`--hosts A,B` (MPI rows through the launcher): every transport that can run between the two hosts,
same sizes and methodology, `--device` applied to every row, one comparison row per transport.

What can run is read from this host's libraries (the engine's --inventory-json, the one reader of
them): TCP; verbs on every RDMA port that is up; UCX once per network transport it offers (on the
--device when one is given); libfabric once per provider that reaches other hosts; each MPI whose
engine was built (with --hosts). A transport the peer lacks fails its own row, with the reason.
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from . import inventory
from .errors import EXIT_PEER, EXIT_UNSUPPORTED, EXIT_USAGE, FabscopeError
from .launch import plan, runner
from .launch.engine import backends as engine_backends
from .launch.mpirun import MPI_FLAVOURS, find_mpi_engine
from .launch.rspreload import LABEL as PRELOAD_LABEL
from .launch.rspreload import Preload, find_library
from .report import charts
from .report.charts import ComparisonRow
from .report.figures import comparison_rows, make_label
from .report.html import ReportInput, render_html
from .report.markdown import comparison_markdown
from .report.render import render_csv, render_json, render_md
from .report.table import cell
from .report.text_table import aligned
from .results import Result
from .results.suite import SuiteSummary  # the suite's shape: owned by the result model
from .session.auth import Key
from .suite_measure import DEFAULT as DEFAULT_MEASURE
from .suite_measure import Measure

# libfabric providers that only reach processes on the same host.
HOST_LOCAL_PROVIDERS = ("shm", "sm2", "self")
OMPI_PML_UCX = (("pml", "ucx"), ("pml_ucx_tls", "any"), ("pml_ucx_devices", "any"))
VERBS_ABSENT = ("verbs: not in this table: {why}. To see verbs rows on a machine without an RDMA NIC, run the suite "
                "in the Soft-RoCE guest: `fabscope testbed softroce run -- fabscope suite --quick`, or between two "
                "guests: `fabscope testbed softroce run --two-guests -- fabscope suite --peer peer`")


@dataclass(frozen=True)
class Transport:
    """One row of the comparison: a backend, its operation, and what is asked of it."""

    backend: str
    op: str
    options: tuple[str, ...] = ()
    mpi: str | None = None
    mca: tuple[tuple[str, str], ...] = ()  # Open MPI selection (the MPI rows)
    preload: str | None = None  # tcp under librspreload: the RDMA device the verdict judges (rspreload.py)
    behind: str | None = None  # a socket row on the netdev behind this RDMA device (--device of an RDMA device)

    @property
    def table_label(self) -> str:
        """The name the comparison gives this transport's records (report.figures.transport_label)."""
        return self._named(with_behind=False)

    @property
    def shown_label(self) -> str:
        """The row's name in the table: its records' name, and for a socket row run on the netdev
        behind an RDMA device, that device too ("tcp send (eth0, behind rxe0)")."""
        return self._named(with_behind=True)

    def _named(self, with_behind: bool) -> str:
        if self.preload:
            return make_label(PRELOAD_LABEL, self.op, "")
        shown = [f"{k} {v}" for o in self.options for k, _, v in [o[2:].partition("=")]
                 if k in ("ucx-tls", "provider", "domain")]
        devices = [o.partition("=")[2] for o in self.options if o.startswith("--device=")]
        shown += [f"{d}, behind {self.behind}" if with_behind and self.behind else f"device {d}" for d in devices]
        parts = [self.mpi] if self.mpi else []
        parts += [f"pml {v}" for k, v in self.mca if k == "pml"]
        return make_label(self.backend, self.op, ", ".join(parts + shown))

    @property
    def label(self) -> str:
        extra = " ".join(self.options) + (f" --mpi={self.mpi}" if self.mpi else "")
        extra += "".join(f" --mca {k}={v}" for k, v in self.mca)
        extra = " ".join(filter(None, (extra.strip(), f"--preload=rsocket --device={self.preload}" if self.preload
                                       else "")))
        return f"{self.backend} {self.op}" + (f" ({extra})" if extra else "")


def _ucx_tls(transport: str, net: Sequence[str]) -> str:
    """UCX_TLS for a row of one transport: a connected RDMA transport (rc_*, dc_*) cannot set up its
    own connections (UCX wires up over an active-message transport), so the UD transport of the
    same library comes along as ``:aux``, used for wire-up only, as UCX's own ``rc`` alias does."""
    if transport.startswith(("rc_", "dc_")):
        ud = "ud_mlx5" if transport.endswith("_mlx5") and "ud_mlx5" in net else "ud_verbs"
        if ud in net:
            return f"{transport},{ud}:aux"
    return transport


def _ucx_names(inv: inventory.EngineInventory, device: str) -> set[str]:
    """UCX's names for --device: the device itself where UCX lists it (eth0, rxe0:1), else the ports
    UCX lists of that RDMA device (rxe0 -> rxe0:1); empty when UCX knows neither."""
    names = {r.device for r in inv.ucx.resources if r.device_type == "net"}
    return {device} if device in names else {n for n in names if n.partition(":")[0] == device and ":" in n}


def _ofi_cores(inv: inventory.EngineInventory, device: str | None) -> list[str]:
    """One libfabric provider per core provider that reaches other hosts (on `device` when given):
    "tcp" and "tcp;ofi_rxm" are the same wire (the engine layers the core name itself when the
    endpoint needs it)."""
    cores: dict[str, str] = {}
    for p in inv.ofi.provider_names:
        core = p.split(";")[0]
        if core not in HOST_LOCAL_PROVIDERS and (not device or device in inv.ofi.domains_of(p)):
            cores[core] = core if core in inv.ofi.provider_names else cores.get(core, p)
    return list(cores.values())


def netdev_behind(inv: inventory.EngineInventory, device: str) -> tuple[str | None, str | None]:
    """The netdev behind an RDMA device (its port's, as the inventory reads it from the GID table or
    the device's parent), for the rows that run over sockets: (netdev, None); (None, why) when the
    device has none; (device, None) when `device` is not an RDMA device (a netdev, given as it is).
    `device` may name a port, "rxe0:1"."""
    name, _, port = device.partition(":")
    dev = inv.verbs.device(name) if inv.verbs.ok else None
    if dev is None:
        return device, None
    ports = [p for p in dev.ports if not port or str(p.port) == port]
    netdevs = list(dict.fromkeys(p.netdev for p in ports if p.netdev))
    if netdevs:
        return netdevs[0], None
    return None, (f"--device {device} is an RDMA device with no netdev behind it (the inventory names none for "
                  f"its port{'s' if len(ports) != 1 else ''}: InfiniBand without IPoIB?), so the rows that run "
                  "over sockets have no interface to use; give a netdev with --device to measure them")


def _verbs_rows(inv: inventory.EngineInventory, device: str | None) -> tuple[list[Transport], str | None]:
    if not inv.verbs.ok:
        return [], VERBS_ABSENT.format(why=inv.verbs.describe("libibverbs"))
    rows = [Transport("verbs", "send", (f"--device={d.name}", f"--ib-port={p.port}"))
            for d in inv.verbs.devices for p in d.ports
            if (p.state or "").upper().endswith("ACTIVE") and (not device or device == d.name)]
    if rows:
        return rows, None
    if not inv.verbs.devices:
        return [], VERBS_ABSENT.format(why="this host has no RDMA device")
    ports = ", ".join(f"{d.name}/{p.port} {p.state}" for d in inv.verbs.devices for p in d.ports)
    return [], VERBS_ABSENT.format(why=f"no RDMA port is up ({ports})" + (f" on --device {device}" if device else ""))


def _rsocket_rows(verbs: Sequence[Transport], with_preload: bool, notes: list[str]) -> list[Transport]:
    """Sockets over RDMA beside tcp and verbs, on each RDMA device the verbs rows use: the rsocket
    API, and (on the first device) unmodified tcp under librspreload, against the peer's `serve
    --preload rsocket` (--preload-peer)."""
    devices = list(dict.fromkeys(o.split("=", 1)[1] for t in verbs for o in t.options if o.startswith("--device=")))
    rows = [Transport("rsocket", "send", (f"--device={d}",)) for d in devices] if "rsocket" in engine_backends() else []
    if devices and "rsocket" not in engine_backends():
        notes.append("rsocket: not in this table: the engine was built without librdmacm's rsocket (`make setup` "
                     "with librdmacm-dev)")
    if devices and with_preload:
        try:
            find_library("rsocket")
            rows.append(Transport("tcp", "send", (), preload=devices[0]))
        except FabscopeError as exc:
            notes.append(f"{PRELOAD_LABEL}: not in this table: {exc.message}")
    elif devices:
        notes.append(f"{PRELOAD_LABEL}: not in this table: it needs a `fabscope serve --preload rsocket` on the peer "
                     "(beside the plain one, on its own --port); give its address with --preload-peer HOST:PORT")
    return rows


def verbs_on_this_host(device: str | None = None) -> tuple[list[str], str | None]:
    """RDMA devices with a port up here (for verbs rows), or the line saying why there are none."""
    rows, why = _verbs_rows(inventory.query(), device)
    devices = list(dict.fromkeys(o.split("=", 1)[1] for t in rows for o in t.options if o.startswith("--device=")))
    return devices, why


def transports(inv: inventory.EngineInventory, device: str | None, with_mpi: bool,
               with_peer: bool, with_preload: bool = False) -> tuple[list[Transport], list[str]]:
    """Every transport to measure between the two hosts, and a line for each one left out (why)."""
    rows: list[Transport] = []
    notes: list[str] = []
    dev = (f"--device={device}",) if device else ()
    # UCX (and MPI over it) names an RDMA device by its ports, "rxe0:1": --device rxe0 means those.
    ucx_devs = _ucx_names(inv, device) if device else set()
    ucx_dev = (f"--device={','.join(sorted(ucx_devs))}",) if ucx_devs else dev
    # Sockets (tcp, UCX's tcp, libfabric's socket providers) run on the netdev behind an RDMA device.
    netdev, no_netdev = netdev_behind(inv, device) if device else (None, None)
    behind = device if device and netdev and netdev != device else None
    if with_peer:
        if netdev or not device:
            rows.append(Transport("tcp", "send", (f"--device={netdev}",) if netdev else (), behind=behind))
        else:
            notes.append(f"tcp send: not in this table: {no_netdev}")
        verbs, why = _verbs_rows(inv, device)
        rows += verbs
        notes += [why] if why else []
        rows += _rsocket_rows(verbs, with_preload, notes)
        if inv.ucx.ok:
            net = sorted({r.transport for r in inv.ucx.resources
                          if r.device_type == "net" and (not device or r.device in ucx_devs)})
            rows += [Transport("ucx", "tag", (f"--ucx-tls={_ucx_tls(t, net)}", *ucx_dev)) for t in net]
            if behind:
                socket_tls = sorted({r.transport for r in inv.ucx.resources if r.device_type == "net"
                                     and r.device == netdev and r.transport not in net})
                rows += [Transport("ucx", "tag", (f"--ucx-tls={t}", f"--device={netdev}"), behind=behind)
                         for t in socket_tls]
            if not net:
                notes.append(f"ucx: no network transport on {device or 'any device'} (UCX offers "
                             f"{', '.join(sorted({r.transport + '/' + r.device for r in inv.ucx.resources}))})")
        else:
            notes.append(inv.ucx.describe("ucx"))
        if inv.ofi.ok:
            providers = _ofi_cores(inv, device)
            rows += [Transport("ofi", "send", (f"--provider={p}", *dev)) for p in providers]
            if behind and netdev:
                rows += [Transport("ofi", "send", (f"--provider={p}", f"--device={netdev}"), behind=behind)
                         for p in _ofi_cores(inv, netdev) if p.split(";")[0] not in {c.split(";")[0] for c in providers}]
        else:
            notes.append(inv.ofi.describe("libfabric"))
    if with_mpi:
        for mpi in MPI_FLAVOURS:
            try:
                find_mpi_engine(mpi)
            except FileNotFoundError:
                notes.append(f"mpi {mpi}: its engine was not built (its development package was missing; `make setup`)")
                continue
            # An RDMA device in UCX's spelling (its port), a netdev as it is (btl_tcp_if_include too).
            mpi_dev = ucx_dev if device and device not in {r.device for r in inv.ucx.resources} else dev
            rows.append(Transport("mpi", "send", mpi_dev, mpi=mpi))
            if mpi == "openmpi":
                # Open MPI's two selections between hosts: its default (pml ob1 over btl tcp) and pml ucx,
                # told to use any UCX transport and device (the fix the field notes give for UCX #10049).
                rows.append(Transport("mpi", "send", mpi_dev, mpi=mpi, mca=OMPI_PML_UCX))
    return rows, notes


def _plan(t: Transport, pattern: str, measure: Measure, where: plan.Where, timeout_s: float) -> plan.RunPlan:
    """A row's RunPlan: the suite's measurement, the row's own options, the suite's deadline."""
    own = [(k[2:], v) for k, _, v in (o.partition("=") for o in t.options)]
    preload = Preload.of("rsocket", t.preload) if t.preload else None
    return plan.RunPlan.of([*measure.row_options(t.backend, t.op, pattern), *own, ("timeout", f"{timeout_s:g}")], where,
                           preload=preload)


def line_rates_gbps() -> dict[str, float]:
    """This host's port rates: RDMA ports (device and device/port) and physical netdevs. A virtual
    netdev's "speed" (veth says 10000) is no line rate, so it is left out: unknown, not invented."""
    from .devices import discover

    inv = discover()
    out: dict[str, float] = {}
    for nd in inv.netdevs:
        if nd.speed_mbps and not nd.virtual:
            out[nd.name] = nd.speed_mbps / 1000.0
    for d in inv.rdma_devices:
        for p in d.ports:
            if p.rate_gbps:
                out[f"{d.name}/{p.num}"] = p.rate_gbps
                out.setdefault(d.name, p.rate_gbps)
    return out


def only_backends(labels: Sequence[str], backends: Sequence[str] | None, notes: Sequence[str]) -> None:
    """`suite --backends`: a backend asked for that has no row here is an error (never a silently
    shorter table), naming why where a note says so. `labels` are the backends of the planned rows."""
    missing = [b for b in backends or () if b not in labels]
    if missing:
        why = [n for n in notes if any(n.startswith(b) for b in missing)]
        raise FabscopeError(f"suite --backends: no {', '.join(missing)} row can run here"
                            + (f" ({'; '.join(why)})" if why else "")
                            + f"; rows that can: {', '.join(dict.fromkeys(labels)) or 'none'}", EXIT_USAGE)


def check_hosts(hosts: Sequence[str]) -> None:
    if len(hosts) != 2 or not all(hosts):
        raise FabscopeError(f"--hosts {','.join(hosts)}: give exactly two hosts, A,B (rank 0 on A, rank 1 on B)",
                            EXIT_USAGE)
    if hosts[0] == hosts[1]:
        raise FabscopeError(f"--hosts {','.join(hosts)}: the same host twice; give two different hosts", EXIT_USAGE)


def run_suite_hosts(out_dir: str, *, peer: str | None = None, hosts: Sequence[str] | None = None,
                    device: str | None = None, key: Key | None = None, launcher: str = "mpirun",
                    timeout_s: float = 10.0, measure: Measure = DEFAULT_MEASURE, backends: Sequence[str] | None = None,
                    preload_peer: str | None = None) -> int:
    if not peer and not hosts:
        raise FabscopeError("suite: give --peer HOST (against `fabscope serve` there) and/or --hosts A,B (MPI rows)",
                            EXIT_USAGE)
    if hosts:
        check_hosts(hosts)
    inv = inventory.query()
    rows, notes = transports(inv, device, with_mpi=bool(hosts), with_peer=bool(peer), with_preload=bool(preload_peer))
    only_backends([t.backend for t in rows], backends, notes)
    rows = [t for t in rows if backends is None or t.backend in backends]
    if not peer:
        notes.append("tcp, verbs, ucx, libfabric: not in this table: they run against `fabscope serve` on the other "
                     "host; add --peer HOST")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    records: list[Result] = []
    outcomes: list[runner.RunOutcome] = []
    failed: list[str] = []  # rows (or one pattern of a row) that did not finish
    failed_rows: list[dict[str, Any]] = []  # the same, for suite.json
    misrouted: list[str] = []  # results whose bytes went elsewhere than asked
    unfinished: dict[str, list[str]] = {}  # a row's patterns that failed, by its table label
    started = time.monotonic()
    where = peer or (hosts[1] if hosts else "")
    for t in rows:
        for pattern in ("lat", "bw"):
            print(f"fabscope suite: {t.label} {pattern} -> {where} ...", file=sys.stderr, flush=True)
            got: list[Result] = []
            at: plan.Where
            if t.backend == "mpi":
                assert t.mpi is not None
                at = plan.MpiLaunch(mpi=t.mpi, launcher=launcher, hosts=tuple(hosts or ()), mca=t.mca)
            else:
                assert peer is not None
                at = plan.Peer(preload_peer if t.preload and preload_peer else peer, key=key, wait_if_busy=True)
            row_started = time.monotonic()
            outcome = plan.execute_row(_plan(t, pattern, measure, at, timeout_s), got.append)
            print(f"fabscope suite: {t.label} {pattern}: exit {outcome.exit_code}, {len(got)} results in "
                  f"{time.monotonic() - row_started:.1f} s", file=sys.stderr, flush=True)
            records += got
            outcomes.append(outcome)
            misrouted += [f"{t.label} {pattern} {r.size} B: MISROUTED: {r.path.summary}" for r in got if r.misrouted]
            if outcome.exit_code == EXIT_UNSUPPORTED:
                notes.append(f"{t.label} {pattern}: unsupported: {outcome.error}")
            elif outcome.exit_code:
                failed.append(f"{t.label} {pattern}: FAILED (exit {outcome.exit_code}): {outcome.error}")
                failed_rows.append({"row": f"{t.label} {pattern}", "exit_code": outcome.exit_code,
                                    "error": outcome.error or ""})
                unfinished.setdefault(t.table_label, []).append(pattern)
                if outcome.exit_code == EXIT_PEER and not records:
                    # The very first run could not reach the peer: every other row would wait out its
                    # own deadline for the same reason.
                    raise FabscopeError(f"suite: {outcome.error}", EXIT_PEER)
    rates = line_rates_gbps()
    # A row measured in part says which pattern failed, in its path column: never a figure left
    # empty without a word (the reason is in the notes under the table).
    compared = [replace(r, path=f"{r.path}; {' and '.join(unfinished[r.label])} FAILED") if r.label in unfinished
                else r for r in comparison_rows(records, rates)]
    # A transport with no result at all still has its row: it says what became of it.
    shown = {t.table_label: t.shown_label for t in rows}
    compared = [replace(r, label=shown.get(r.label, r.label)) for r in compared]
    measured = {r.label for r in compared}
    for t in rows:
        if t.shown_label not in measured:
            said = [line for line in failed + notes if line.startswith(f"{t.label} ")]
            what = "unsupported" if said and all(": unsupported: " in line for line in said) else "FAILED"
            compared.append(ComparisonRow(t.shown_label, None, None, None, None, None, None, "-", what))
    table = comparison_markdown(compared)
    title = f"fabscope suite {'between ' + ', '.join(hosts) if hosts else 'to ' + str(peer)}"
    print(f"# {title}: {len(records)} results in {time.monotonic() - started:.0f} s; latency = half round trip, "
          "bandwidth at the receiver (Gb/s = 10^9 bit/s)")
    why = [line for r in compared for line in r.why]
    print(text_table(compared))
    for line in why + notes + misrouted + failed:
        print(f"# {line}")
    summary = SuiteSummary(title=title, peer=peer, hosts=list(hosts or []), device=device, line_rates_gbps=rates,
                           notes=notes + misrouted + failed, rows=[asdict(r) for r in compared], failed=failed_rows)
    (out / "suite.json").write_text(json.dumps(summary.to_json(), indent=1) + "\n")
    (out / "hosts.jsonl").write_text(render_json(records))
    (out / "hosts.csv").write_text(render_csv(records))
    (out / "hosts.md").write_text(f"# {title}\n\n" + "".join(f"{n}\n\n" for n in notes + misrouted + failed) + table + "\n"
                                  + "".join(f"> {line}\n\n" for line in why) + render_md(records))
    written = "hosts.md, hosts.csv, hosts.jsonl, suite.json"
    if charts.available():
        (out / "report.html").write_text(render_html(ReportInput(records, title=title, line_rates=rates,
                                                                 notes=notes + misrouted + failed)))
        written += ", report.html"
    print(f"\nreport: {out}/{written}")
    return plan.rows_exit_code(outcomes)


def text_table(rows: Sequence[ComparisonRow]) -> str:
    """The comparison as text: figures right-aligned, names, verdicts and causes left-aligned."""
    t = charts.comparison_table(rows)
    cells = [[cell(c, v) for c, v in zip(t.columns, r, strict=True)] for r in t.rows]
    right = {i for i, c in enumerate(t.columns) if c.key not in ("label", "carried_by", "path", "why_cell")}
    return "\n".join(aligned([c.title for c in t.columns], cells, right=right))
