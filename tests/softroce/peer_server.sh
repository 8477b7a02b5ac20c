#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# The server half of a peer tool (ucx_perftest, fi_pingpong, rstream), started in the server guest
# over ssh by middleware_cases.run_peer: usage `peer_server.sh SECONDS 'COMMAND'`.
#
# It prints "fabscope-peer: listening" once the command has opened a listening endpoint that was not
# there before (a TCP socket in `ss`, or an rdma_cm id in LISTEN in `rdma res show cm_id`: rstream
# and the verbs MSG endpoints listen there), so the client half starts as soon as it can be
# answered instead of after a fixed head start that must cover ssh and the library's start-up
# under TCG. Then it waits for the command and exits with its status. Without a new listener
# within SECONDS it says nothing and the client half's own retries decide.
listeners() {
    { ss -Hltn 2>/dev/null | awk '{print "tcp " $4}'
      rdma res show cm_id 2>/dev/null | grep -w LISTEN | sed 's/^/cm /'; } | sort
}
before=$(listeners)
timeout "$1" sh -c "$2" &
pid=$!
end=$(( $(date +%s) + $1 ))
while kill -0 "$pid" 2>/dev/null && [ "$(date +%s)" -lt "$end" ]; do
    new=$(listeners | grep -vxF "$before")
    if [ -n "$new" ]; then
        echo "fabscope-peer: listening"
        break
    fi
    sleep 0.1
done
wait "$pid"
