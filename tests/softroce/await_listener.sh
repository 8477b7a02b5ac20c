#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Waits in one guest until the other guest's server listens, before the client half starts:
# usage `await_listener.sh HOST LISTENER SECONDS`, LISTENER tcp:PORT (a TCP socket in `ss`) or
# cm:PORT (an rdma_cm id in LISTEN in `rdma res show cm_id`: perftest -R, rsockets). It asks HOST
# over the testbed's ssh (whose sshd may still be starting) every 0.2 s; no listener within SECONDS
# is said and exits 99, so the client is not started to be refused. The testbed itself starts the
# client guest's command once the server guest's command listens on something (any TCP or rdma_cm
# listener of its process tree: softroce_guest/listening.sh); a test whose server command starts
# several servers (`sh -c 'A & exec B'`) names here each port its clients need.
case "$2" in
tcp:*) check="ss -Hltn 'sport = :${2#tcp:}' | grep -q ." ;;
cm:*) check="rdma res show cm_id | grep -w LISTEN | grep -Eq 'src-addr [^ ]*:${2#cm:}( |\$)'" ;;
*) echo "await_listener: unknown listener '$2' (tcp:PORT or cm:PORT)" >&2; exit 2 ;;
esac
end=$(( $(date +%s) + $3 ))
until ssh "$1" "$check" 2>/dev/null; do
    if [ "$(date +%s)" -ge "$end" ]; then
        echo "await_listener: $1 did not listen on $2 within $3 s" >&2
        exit 99
    fi
    sleep 0.2
done
