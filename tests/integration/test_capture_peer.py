# SPDX-License-Identifier: BSD-3-Clause
"""serve's "capture" service (capture/peer.py) against a real keyed `fabscope serve` on loopback: a
serve that cannot capture says why before anything is measured, over the authenticated session,
and stays free for runs. The capture itself (tcpdump + tshark) runs between the Soft-RoCE guests
(tests/softroce/test_rsocket_capture.py): this host has neither."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from serve_helpers import make_key, serve

from fabscope.capture.peer import PeerCapture
from fabscope.errors import EXIT_USAGE, FabscopeError
from fabscope.session import auth


@pytest.mark.skipif(shutil.which("tcpdump") is not None, reason="tcpdump is installed here: the refusal needs a host "
                                                                  "that cannot capture")
def test_a_serve_that_cannot_capture_refuses_before_the_run(tmp_path: Path) -> None:
    key_file = make_key(tmp_path / "key")
    with serve(tmp_path, "--bind", "127.0.0.1", "--key-file", str(key_file)) as srv:
        with pytest.raises(FabscopeError) as err:
            PeerCapture.start(srv.addr, auth.load_key(str(key_file)), "verbs", False, 128, 1000)
        assert err.value.exit_code == EXIT_USAGE
        text = str(err.value)
        assert f"--capture on the peer {srv.addr}: this serve cannot capture" in text
        assert "tcpdump, which is not installed" in text
        refused = srv.wait_event("refused")
        assert refused[-1]["reason"] == "capture" and "tcpdump" in refused[-1]["message"]
        assert not srv.events("start")  # no run was started for it
        # the session was authenticated (sealed frames both ways) and serve is not left busy
        assert srv.events("capture")[0]["key_id"] == auth.load_key(str(key_file)).key_id
