# SPDX-License-Identifier: BSD-3-Clause
"""The latency reference from the history (issue 20): latency has no universal ceiling, so a
latency result is measured against the fabric's own p50 of the same case in earlier runs.

The same case: same hosts (this one and the peer, as the engines named them), backend, op,
pattern ``lat``, size, and what carried it (``Result.case``); a misrouted result (its bytes went
elsewhere) is no reference. By default the reference is the best (lowest) p50 of every earlier
run of the case, the run being explained excluded; ``--reference TAG|RUN`` names one: that run's
p50, or the median of the p50s of a tag's runs. A named reference without this case is an error
(exit 2), never a silent fall back to the default.

A bandwidth result has its reference the same way (``find_bandwidth_reference``: the best Gb/s),
and its delay cause reads the round trip the same case showed on its newest clean runs
(``find_delay_reference``: the median TCP_INFO round trip of each sender, results/delay.py).

This module finds the references; ``fabscope.results.explain`` (``with_reference``,
``with_bandwidth_reference``, ``with_delay_reference``) words them.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from .errors import EXIT_USAGE, FabscopeError
from .results import Result
from .results.delay import DELAY_CLEAN_OF, DELAY_REFERENCE_RUNS, DelayReference
from .results.explain import (
    BandwidthReference,
    LatencyReference,
    with_bandwidth_reference,
    with_delay_reference,
    with_reference,
)
from .store import Filters, Store, default_path, open_store

__all__ = ["NamedReference", "ReferenceLookup", "find_bandwidth_reference", "find_delay_reference", "find_reference",
           "resolve_named"]

# At most this many runs are listed when a --reference names nothing usable.
LISTED_RUNS = 8


@dataclass(frozen=True)
class NamedReference:
    """A ``--reference TAG|RUN`` resolved against the store: the spec as given and its run ids."""

    spec: str
    run_ids: tuple[int, ...]


def _same_case(a: Result, b: Result) -> bool:
    return a.case == b.case and a.hosts == b.hosts


def _case_text(r: Result) -> str:
    host, peer = r.hosts
    return f"{r.backend} {r.op} lat {r.size} B over {r.transport.label}, {host or '?'} -> {peer or '?'}"


def _p50s_by_run(store: Store, result: Result, run_ids: tuple[int, ...] | None,
                 exclude_run: int | None) -> dict[int, float]:
    """run id -> the p50 of the case in that run (several results of the case in one run: the
    best), over the stored runs (``run_ids``: only those)."""
    filters = Filters(backend=result.backend, op=result.op, pattern="lat", size=result.size)
    out: dict[int, float] = {}
    for run_id, stored in store.results_by_run(list(run_ids) if run_ids is not None else None, filters):
        if run_id == exclude_run or stored.latency is None or stored.misrouted or not _same_case(stored, result):
            continue
        out[run_id] = min(out.get(run_id, stored.latency.p50), stored.latency.p50)
    return out


def _gbps_by_run(store: Store, result: Result, run_ids: tuple[int, ...] | None,
                 exclude_run: int | None) -> dict[int, float]:
    """run id -> the case's bandwidth in that run (several results of the case in one run: the best)."""
    filters = Filters(backend=result.backend, op=result.op, pattern=result.pattern, size=result.size)
    out: dict[int, float] = {}
    for run_id, stored in store.results_by_run(list(run_ids) if run_ids is not None else None, filters):
        gbps = stored.bandwidth.gbps if stored.bandwidth else None
        if run_id == exclude_run or not gbps or stored.misrouted or not _same_case(stored, result):
            continue
        out[run_id] = max(out.get(run_id, gbps), gbps)
    return out


def find_bandwidth_reference(store: Store, result: Result, *, exclude_run: int | None = None,
                             named: NamedReference | None = None) -> BandwidthReference | None:
    """A bandwidth result's reference, as ``find_reference`` for latency: the best (highest) Gb/s of
    the case over the stored runs, or the named run's / the median of the named runs'. None: no
    earlier run of the case (default only; a named reference without it is exit 2)."""
    if result.bandwidth is None or not result.bandwidth.gbps:
        return None
    by_run = _gbps_by_run(store, result, named.run_ids if named else None, exclude_run)
    if named is None:
        if not by_run:
            return None
        best = max(by_run, key=lambda i: (by_run[i], i))
        info = store.run(best)
        return BandwidthReference(gbps=by_run[best], run_id=best, run_ids=(best,), tag=info.tag, when=info.started_at,
                                  runs_considered=len(by_run))
    if not by_run:
        many = len(named.run_ids) > 1
        raise FabscopeError(
            f"--reference {named.spec}: run{'s' if many else ''} {', '.join(map(str, named.run_ids))} in {store.path} "
            f"hold{'' if many else 's'} no result of this case ({result.backend} {result.op} {result.pattern} "
            f"{result.size} B over {result.transport.label}). Name a run or tag of the same hosts, backend, op, "
            "pattern and size, or leave --reference out (the best earlier run of the case)", EXIT_USAGE)
    ids = tuple(sorted(by_run))
    infos = [store.run(i) for i in ids]
    tags = {i.tag for i in infos}
    when = infos[0].started_at if len(ids) == 1 else f"{infos[0].started_at}..{infos[-1].started_at}"
    return BandwidthReference(gbps=float(statistics.median(by_run[i] for i in ids)),
                              run_id=ids[0] if len(ids) == 1 else None, run_ids=ids,
                              tag=tags.pop() if len(tags) == 1 else None, when=when, runs_considered=len(ids),
                              named=named.spec)


def find_delay_reference(store: Store, result: Result, *, exclude_run: int | None = None) -> DelayReference | None:
    """The round trip the same case (hosts, backend, op, pattern, size, carrier) showed on its newest
    clean runs (at most DELAY_REFERENCE_RUNS; clean: not misrouted, none of DELAY_CLEAN_OF seen):
    each sender's median TCP_INFO round trip at the end of the run. None: a latency result, or no
    clean run of the case that reported a round trip."""
    if result.pattern == "lat":
        return None
    filters = Filters(backend=result.backend, op=result.op, pattern=result.pattern, size=result.size)
    by_run: dict[int, dict[str, list[int]]] = {}
    for run_id, stored in store.results_by_run(None, filters):
        expl = stored.explanation
        if (run_id == exclude_run or stored.misrouted or not _same_case(stored, result) or expl is None
                or any(c.cause in DELAY_CLEAN_OF for c in expl.seen)):
            continue
        transport = stored.raw.get("transport")
        for side in ("local", "peer"):
            facts = transport.get(side) if isinstance(transport, dict) else None
            rtt = facts.get("rtt_us") if isinstance(facts, dict) else None
            if isinstance(rtt, int) and not isinstance(rtt, bool) and rtt > 0:
                by_run.setdefault(run_id, {}).setdefault(side, []).append(rtt)
    newest = sorted(by_run, reverse=True)[:DELAY_REFERENCE_RUNS]
    if not newest:
        return None
    rtts: dict[str, float] = {}
    for side in ("local", "peer"):
        per_run = [min(by_run[i][side]) for i in newest if side in by_run[i]]  # a run's best of the case
        if per_run:
            rtts[side] = float(statistics.median(per_run))
    return DelayReference(rtt_us=rtts, run_ids=tuple(newest))


def _listing(store: Store, filters: Filters) -> str:
    """The runs of the store a user could name instead (newest first), and its tags."""
    runs = store.runs(filters, limit=LISTED_RUNS)
    if not runs:
        return "none"
    shown = ", ".join(f"{r.id}" + (f" (tag {r.tag})" if r.tag else "") + f" {r.cases}" for r in runs)
    return shown + (" ..." if len(runs) == LISTED_RUNS else "")


def resolve_named(store: Store, spec: str, *, backend: str, op: str | None, pattern: str = "lat") -> NamedReference:
    """``--reference TAG|RUN`` against the store, before anything is measured: a run id, latest,
    latest~N or a tag (``Store.run_ids_for``) whose runs hold latency results of this backend (and
    op, when given). Anything else is a usage error (exit 2) naming what was asked and what exists."""
    lat = Filters(backend=backend, op=op, pattern=pattern)
    what = f"{backend}{f' {op}' if op else ''} {'latency' if pattern == 'lat' else pattern}"
    try:
        run_ids = tuple(store.run_ids_for(spec))
    except FabscopeError as exc:
        asked = exc.message if exc.message.startswith(f"{spec}:") else f"{spec}: {exc.message}"
        raise FabscopeError(f"--reference {asked}; runs of {what} there: {_listing(store, lat)}", EXIT_USAGE) from exc
    if not any(store.runs(lat, run_id=i) for i in run_ids):
        held = "; ".join(f"run {r.id}: {r.cases}" for i in run_ids for r in store.runs(run_id=i)) or "no results"
        raise FabscopeError(
            f"--reference {spec}: run{'s' if len(run_ids) > 1 else ''} {', '.join(map(str, run_ids))} in {store.path} "
            f"hold{'' if len(run_ids) > 1 else 's'} no {what} results ({held}); runs of {what} there: "
            f"{_listing(store, lat)}", EXIT_USAGE)
    return NamedReference(spec, run_ids)


def find_reference(store: Store, result: Result, *, exclude_run: int | None = None,
                   named: NamedReference | None = None) -> LatencyReference | None:
    """The reference of one latency result: the best p50 of the case over the stored runs (less
    ``exclude_run``, the run being explained), or, ``named``, that run's p50 / the median of those
    runs' p50s. None: no earlier run of the case (default only; a named reference without the case
    is a FabscopeError, exit 2). Not a latency result: None."""
    if result.pattern != "lat" or result.latency is None:
        return None
    p50s = _p50s_by_run(store, result, named.run_ids if named else None, exclude_run)
    if named is None:
        if not p50s:
            return None
        best = min(p50s, key=lambda i: (p50s[i], -i))  # a tie: the newer run
        info = store.run(best)
        return LatencyReference(p50_us=p50s[best], run_id=best, run_ids=(best,), tag=info.tag,
                                when=info.started_at, runs_considered=len(p50s))
    if not p50s:
        held = sorted({_case_text(r) for _, r in store.results_by_run(
            list(named.run_ids), Filters(pattern="lat", backend=result.backend))})
        many = len(named.run_ids) > 1
        raise FabscopeError(
            f"--reference {named.spec}: run{'s' if many else ''} {', '.join(map(str, named.run_ids))} in {store.path} "
            f"hold{'' if many else 's'} no result of this case ({_case_text(result)}); "
            f"{result.backend} latency there: {'; '.join(held) or 'none'}. Name a run or tag of the same hosts, "
            "backend, op and size, or leave --reference out (the best earlier run of the case)", EXIT_USAGE)
    ids = tuple(sorted(p50s))
    infos = [store.run(i) for i in ids]
    tags = {i.tag for i in infos}
    tag = tags.pop() if len(tags) == 1 else None
    when = infos[0].started_at if len(ids) == 1 else f"{infos[0].started_at}..{infos[-1].started_at}"
    return LatencyReference(p50_us=float(statistics.median(p50s[i] for i in ids)),
                            run_id=ids[0] if len(ids) == 1 else None, run_ids=ids, tag=tag, when=when,
                            runs_considered=len(ids), named=named.spec)


class ReferenceLookup:
    """What `fabscope run` gives each latency result as it arrives: its reference from the history
    (the store the run writes to, or, with --no-store, the default store read only: the history is
    still read, only not written). Opened before anything runs, so a bad --reference is exit 2 up
    front; close it after the run (it closes only a store it opened itself)."""

    def __init__(self, store: Store | None, path: Path, named: NamedReference | None, unread: str | None,
                 owned: bool) -> None:
        self.store = store
        self.path = path
        self.named = named
        self.unread = unread
        self._owned = owned
        # A named reference without a size's case: the run fails once every size is measured and
        # shown (measured data is kept), with these messages, never falling back to the default.
        self.missing: list[str] = []

    @classmethod
    def open(cls, writing: Store | None, spec: str | None, *, backend: str, op: str | None,
             pattern: str = "lat") -> ReferenceLookup:
        """``writing``: the store this run writes to (None: --no-store, so the default store is read,
        if there is one). A history that cannot be read is an error with ``spec`` given (the user
        named a run in it) and otherwise said in each result's basis."""
        store, owned, unread = writing, False, None
        path = writing.path if writing is not None else default_path()
        if store is None and (spec is not None or path.is_file()):
            try:
                store, owned = open_store(path, readonly=True), True
            except FabscopeError as exc:
                if spec is not None:
                    raise FabscopeError(f"--reference {spec}: {exc.message}", EXIT_USAGE) from exc
                unread = exc.message
        named = None
        if spec is not None and store is not None:
            try:
                named = resolve_named(store, spec, backend=backend, op=op, pattern=pattern)
            except FabscopeError:
                if owned:
                    store.close()
                raise
        return cls(store, path, named, unread, owned)

    def attach(self, result: Result, run_id: int | None) -> Result:
        """The result with its reference in its explanation (which the JSON output and the store
        carry: Result.to_json); ``run_id``: this run's id in the store, if it
        has one yet (excluded). A non-latency result is returned as it is."""
        if result.explanation is None:
            return result
        if result.pattern != "lat" or result.latency is None:
            return self._attach_bandwidth(result, run_id)
        unread = self.unread
        found = None
        if self.store is not None:
            try:
                found = find_reference(self.store, result, exclude_run=run_id, named=self.named)
            except FabscopeError as exc:
                if exc.exit_code != EXIT_USAGE:
                    raise
                if self.named is not None:
                    self.missing.append(exc.message)  # the run fails after the results are shown
                unread = exc.message  # a damaged record in the store: said in the basis, not fatal
        expl = with_reference(result.explanation, result.latency.p50, found, str(self.path), unread)
        return replace(result, explanation=expl)

    def _attach_bandwidth(self, result: Result, run_id: int | None) -> Result:
        """A bandwidth result with its reference from the history (a named one that lacks the case:
        the run fails after every size is shown, as for latency)."""
        if result.bandwidth is None or not result.bandwidth.gbps or result.explanation is None:
            return result
        unread, found = self.unread, None
        if self.store is not None:
            try:
                found = find_bandwidth_reference(self.store, result, exclude_run=run_id, named=self.named)
            except FabscopeError as exc:
                if exc.exit_code != EXIT_USAGE:
                    raise
                if self.named is not None:
                    self.missing.append(exc.message)
                unread = exc.message
        expl = with_bandwidth_reference(result.explanation, result.bandwidth.gbps, found, str(self.path), unread)
        if self.store is not None:  # the round trip against the case's clean runs (a store damaged: said above)
            try:
                expl = with_delay_reference(expl, result.raw, find_delay_reference(self.store, result,
                                                                                   exclude_run=run_id))
            except FabscopeError as exc:
                if exc.exit_code != EXIT_USAGE:
                    raise
        return replace(result, explanation=expl)

    def close(self) -> None:
        if self._owned and self.store is not None:
            self.store.close()
