# SPDX-License-Identifier: BSD-3-Clause
"""A ReFrame test that runs a fabscope known-good scenario (`fabscope check`, docs/check.md) and
reports each judged figure as a ReFrame performance variable, with the scenario's bound as its
reference, so a site's nightly ReFrame run shows fabscope's figures and fails where the scenario
fails.

    FABSCOPE_SCENARIO=/etc/fabscope/cluster.toml reframe -c deploy/reframe/fabscope_check.py -r

Variables (``-S NAME=VALUE``): ``scenario`` (default $FABSCOPE_SCENARIO), ``fabscope`` (the command,
default ``fabscope``), ``store_args`` (default ``--no-store``; e.g. ``--store /shared/history.db``
for a scenario that names baselines).

Sanity: the scenario's status is pass or warn (fail and inconclusive are not passes). Performance:
one variable per absolute expectation and measured case, named ``CHECK/CASE/FIGURE``, its reference
the bound (``<=``: the value may not exceed it; ``>=``: may not fall below it). A ``warn`` bound is a
reference too: where fabscope warns, ReFrame fails the performance stage."""

from __future__ import annotations

import json
import os
import re

import reframe as rfm
import reframe.utility.sanity as sn
from reframe.core.builtins import run_before, sanity_function, variable

_UNITS = {"p50_us": "us", "p99_us": "us", "p999_us": "us", "max_us": "us", "bw_gbps": "Gb/s",
          "msg_rate_mpps": "Mmsg/s", "errors": "findings", "warnings": "findings"}
_ABSOLUTE = re.compile(r"^\s*(\w+)\s*(<=|>=|<|>|==)")


@rfm.simple_test
class FabscopeCheck(rfm.RunOnlyRegressionTest):
    descr = "fabscope known-good scenario (fabscope check)"
    valid_systems = ["*"]
    valid_prog_environs = ["*"]
    scenario = variable(str, value=os.environ.get("FABSCOPE_SCENARIO", ""))
    fabscope = variable(str, value="fabscope")
    store_args = variable(str, value="--no-store")
    executable = "fabscope"
    tags = {"fabscope", "network"}

    @run_before("run")
    def set_command(self) -> None:
        self.executable = self.fabscope
        self.executable_opts = ["check", self.scenario, "--format", "json", *self.store_args.split()]

    def _outcome(self) -> dict:
        with open(os.path.join(self.stagedir, str(sn.evaluate(self.stdout)))) as f:
            return json.loads(f.readline())

    @sanity_function
    def scenario_passes(self):
        status = self._outcome()["status"]
        return sn.assert_in(status, ("pass", "warn"), msg=f"the scenario's status is {status} (fabscope check)")

    @run_before("performance")
    def set_figures(self) -> None:
        self.perf_variables = {}
        references = {}
        for j in self._outcome()["judgements"]:
            m = _ABSOLUTE.match(j["expectation"])
            if not m or j["value"] is None or j["bound"] is None:
                continue
            figure, op = m.groups()
            name = f"{j['check']}/{j['case']}/{figure}".replace(" ", "_")  # ":" scopes references in ReFrame
            if name in self.perf_variables:  # a second bound on the figure: a variable of its own
                name += f"#{sum(1 for n in self.perf_variables if n.split('#')[0] == name) + 1}"
            unit = _UNITS.get(figure, "")
            self.perf_variables[name] = sn.make_performance_function(sn.defer(float(j["value"])), unit)
            bound = float(j["bound"])
            if op in ("<=", "<"):
                references[name] = (bound, None, 0.0, unit)
            elif op in (">=", ">"):
                references[name] = (bound, 0.0 if bound >= 0 else -0.0, None, unit)
            else:
                references[name] = (bound, 0.0, 0.0, unit)
        self.reference = {"*": references}
