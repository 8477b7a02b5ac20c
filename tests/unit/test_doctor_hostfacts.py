# SPDX-License-Identifier: BSD-3-Clause
"""HostFacts, the facts `fabscope doctor --peer` sends between hosts: the JSON stays flat (one key
per compared version, in the order of the comparison) and reads back to the same facts."""

from __future__ import annotations

import pytest

from fabscope.doctor.crosshost import HostFacts, compare_hosts

FACTS = {"hostname": "a", "kernel": "6.1.0", "rdma_core": "44.0-2", "ucx": "1.16.0", "openmpi": None,
         "libfabric": "1.18.0", "fabscope": "0.1.0", "netdev_mtus": {"eth0": 1500}, "port_active_mtus": {"rxe0/1": 1024}}


def test_json_form_is_flat_ordered_and_round_trips() -> None:
    facts = HostFacts.from_dict(FACTS)
    assert facts.versions["ucx"] == "1.16.0" and facts.versions["openmpi"] is None
    assert list(facts.to_dict().items()) == list(FACTS.items())
    assert HostFacts.from_dict(facts.to_dict()) == facts


def test_unknown_keys_ignored_missing_versions_none_no_hostname_refused() -> None:
    facts = HostFacts.from_dict({"hostname": "b", "kernel": "6.1.0", "from_a_newer_release": 1})
    assert facts.versions == {"kernel": "6.1.0", "rdma_core": None, "ucx": None, "openmpi": None,
                              "libfabric": None, "fabscope": None}
    assert facts.netdev_mtus == {} and facts.port_active_mtus == {}
    with pytest.raises(ValueError, match="without a 'hostname'"):
        HostFacts.from_dict({"kernel": "6.1.0"})


def test_a_version_found_on_one_host_only_names_where_to_install_it() -> None:
    peer = dict(FACTS, hostname="b", openmpi="4.1.4")
    found = {f.id: f for f in compare_hosts(FACTS, peer)}
    assert found["crosshost.openmpi"].severity == "warn"
    assert found["crosshost.openmpi"].fix == "install Open MPI on a"
    assert found["crosshost.ucx"].severity == "ok"
