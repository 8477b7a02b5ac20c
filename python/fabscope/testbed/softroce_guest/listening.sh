#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# usage `listening.sh PID`: does PID, or a process below it, listen? Prints the first listener found,
# "tcp ADDR by COMM (pid N)" (a TCP socket in LISTEN in `ss -Hltnp`: fabscope serve, perftest, the
# peers' out-of-band sockets) or "rdma_cm ADDR by COMM (pid N)" (an rdma_cm id in LISTEN in
# `rdma res show cm_id`: perftest -R, rsockets), and exits 0; exits 1 if none listens yet.
# init.sh polls it for the server guest's command, so the host starts the client guest's command
# once the server can answer it, not after a fixed time. A listener of another process (dropbear's
# ssh port) does not count. The host's tests run it too (tests/unit/test_softroce_listening.py).
root=$1
case "$root" in
''|*[!0-9]*) echo "listening.sh: usage listening.sh PID (got '$root')" >&2; exit 2 ;;
esac

# in_tree PID: is PID the root or below it? (walks the parents up through /proc)
in_tree() {
    p=$1
    while [ -n "$p" ] && [ "$p" -gt 1 ]; do
        [ "$p" = "$root" ] && return 0
        p=$(sed -n 's/^PPid:[[:space:]]*//p' "/proc/$p/status" 2>/dev/null)
    done
    return 1
}

# One line per (kind, address, pid) that listens; a socket shared by several processes has a pid each.
{
    ss -Hltnp 2>/dev/null | awk '{
        s = $0
        while (match(s, /pid=[0-9]+/)) { print "tcp", $4, substr(s, RSTART + 4, RLENGTH - 4); s = substr(s, RSTART + RLENGTH) }
    }'
    rdma res show cm_id 2>/dev/null | awk '/ state LISTEN / {
        a = "?"; p = ""
        for (i = 1; i < NF; i++) { if ($i == "pid") p = $(i + 1); if ($i == "src-addr") a = $(i + 1) }
        if (p != "") print "rdma_cm", a, p
    }'
} | {
    while read -r kind addr pid; do
        if in_tree "$pid"; then
            echo "$kind $addr by $(cat "/proc/$pid/comm" 2>/dev/null || echo '?') (pid $pid)"
            exit 0
        fi
    done
    exit 1
}
