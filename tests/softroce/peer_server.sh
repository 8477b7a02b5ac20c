#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The server half of a peer tool (ucx_perftest, fi_pingpong, rstream), started in the server guest
# over ssh by middleware_cases.run_peer: usage `peer_server.sh SECONDS LISTENER 'COMMAND'`, where
# LISTENER is what the client half connects to: tcp:PORT (a TCP socket in `ss`: ucx_perftest's and
# fi_pingpong's out-of-band sockets) or cm:PORT (an rdma_cm id in LISTEN in `rdma res show cm_id`:
# rstream).
#
# It prints "fabscope-peer: listening on LISTENER" once the command listens there, so the client
# half starts as soon as it can be answered: not after a fixed head start, nor when some other
# socket appears (fi_pingpong's verbs MSG endpoint listens on rdma_cm only after its control
# socket). A listener that was there before the command started, or none within READY_S, is said
# on a line of its own and ends the command with exit 98 or 99: the client half is not started.
# Otherwise it waits for the command (at most SECONDS) and exits with its status.
READY_S=60
listening() {
    case "$1" in
    tcp:*) ss -Hltn "sport = :${1#tcp:}" 2>/dev/null | grep -q . ;;
    cm:*) rdma res show cm_id 2>/dev/null | grep -w LISTEN | grep -Eq "src-addr [^ ]*:${1#cm:}( |\$)" ;;
    *) echo "fabscope-peer: unknown listener '$1' (tcp:PORT or cm:PORT)"; exit 2 ;;
    esac
}
if listening "$2"; then
    echo "fabscope-peer: something already listens on $2 before '$3' started:"
    ss -Hltnp 2>/dev/null; rdma res show cm_id 2>/dev/null | grep -w LISTEN
    exit 98
fi
timeout "$1" sh -c "$3" &
pid=$!
end=$(( $(date +%s) + READY_S ))
until listening "$2"; do
    if ! kill -0 "$pid" 2>/dev/null; then
        wait "$pid"
        echo "fabscope-peer: '$3' ended (exit $?) before it listened on $2"
        exit 99
    fi
    if [ "$(date +%s)" -ge "$end" ]; then
        echo "fabscope-peer: '$3' did not listen on $2 within $READY_S s: stopped"
        kill "$pid" 2>/dev/null
        wait "$pid"
        exit 99
    fi
    sleep 0.1
done
echo "fabscope-peer: listening on $2"
wait "$pid"
