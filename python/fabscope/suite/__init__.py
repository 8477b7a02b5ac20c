# SPDX-License-Identifier: BSD-3-Clause
"""`fabscope suite`: every built backend and pattern in one table. loopback.py runs it on this host,
hosts.py between two hosts (--peer, --hosts; every socket row on the netdev behind an RDMA device
asked for), measure.py owns the sizes and lengths a row measures."""
