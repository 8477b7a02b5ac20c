#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Per-run guest setup, exec'd as PID 1 by /sbin/fabscope-init from the 9p
# control share /fabscope-ctl. The host writes next to it:
#   env      shell assignments FS_* (see softroce.py, _write_control_dir)
#   hosts    the guest's /etc/hosts
#   cmd.sh   the command to run (argv quoted for /bin/sh)
#   siw.ko   only in --siw mode
#   listening.sh  the server guest's readiness check (two guests)
# and reads back `rc` (the command's exit status). Every step prints a marker
# @@fabscope:<nonce>:<event>@@ on the serial console so the host can follow
# progress and report where a failed boot stopped.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root LANG=C.UTF-8
CTL=/fabscope-ctl
. "$CTL/env"

say() { echo "@@fabscope:$FS_NONCE:$*@@"; }

poweroff_now() {
    sync
    # Immediate ACPI power-off; qemu runs with -no-reboot and then exits.
    echo o > /proc/sysrq-trigger
    sleep 60
}

# Setup failure: report it, write an rc the host recognises, power off.
fail() {
    say "error:$*"
    echo 125 > "$CTL/rc.tmp" && mv "$CTL/rc.tmp" "$CTL/setup-failed"
    poweroff_now
}

# wait_for SECONDS CONDITION... : poll (5 Hz) until CONDITION succeeds.
wait_for() {
    n=$(( $1 * 5 )); shift
    while ! "$@" 2>/dev/null; do
        n=$(( n - 1 ))
        [ "$n" -gt 0 ] || return 1
        sleep 0.2
    done
}

# Keep kernel messages off the console the command's output is read from.
echo 1 > /proc/sys/kernel/printk

mountpoint -q /run || mount -t tmpfs -o mode=0755 tmpfs /run
mountpoint -q /tmp || mount -t tmpfs -o mode=1777 tmpfs /tmp
mkdir -p /dev/pts /dev/shm
mountpoint -q /dev/pts || mount -t devpts devpts /dev/pts
mountpoint -q /dev/shm || mount -t tmpfs tmpfs /dev/shm
hostname "$FS_HOSTNAME"
cp "$CTL/hosts" /etc/hosts
say "stage:mounts"

# Shares: the host repo read-only, the output directory read-write. The repo is mounted cache=loose:
# nothing changes it while a guest runs, and without the cache every stat and read of a Python module
# is a round trip to qemu (~0.4 ms each under TCG: 0.7 s of every fabscope start in a guest).
mkdir -p /fabscope /out
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144,ro,cache=loose fabscope /fabscope \
    || fail "cannot mount the repo share (9p tag fabscope) at /fabscope"
mount -t 9p -o trans=virtio,version=9p2000.L,msize=262144 fsout /out \
    || fail "cannot mount the output share (9p tag fsout) at /out"

# No udev: nobody else loads modules; without virtio_net there is no eth0.
# ib_uverbs gives /dev/infiniband/uverbs*, rdma_ucm /dev/infiniband/rdma_cm.
# One modprobe call for all: each kmod start costs time under TCG.
case "$FS_RDMA" in
    rxe) mods="virtio_net ib_uverbs rdma_ucm rdma_rxe" ;;
    siw) mods="virtio_net ib_uverbs rdma_ucm ib_core libcrc32c" ;;
    *) fail "unknown FS_RDMA=$FS_RDMA" ;;
esac
# shellcheck disable=SC2086 # word splitting intended
modprobe -a $mods || fail "modprobe -a $mods failed"
wait_for 10 test -e /sys/class/net/eth0 || fail "no eth0 10 s after loading virtio_net"
ip link set lo up
ip addr add "$FS_ADDR/24" dev eth0 || fail "cannot add $FS_ADDR/24 to eth0"
ip link set eth0 up || fail "cannot bring eth0 up"
if [ -n "${FS_ADDR2:-}" ]; then
    # A second rail: eth1 on its own link and subnet, with its own RDMA device below.
    wait_for 10 test -e /sys/class/net/eth1 || fail "no eth1 10 s after loading virtio_net (FS_ADDR2 is set)"
    ip addr add "$FS_ADDR2/24" dev eth1 || fail "cannot add $FS_ADDR2/24 to eth1"
    ip link set eth1 up || fail "cannot bring eth1 up"
fi
say "stage:network"

case "$FS_RDMA" in
    rxe)
        rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0 failed"
        dev=rxe0 ;;
    siw)
        # Debian's kernel has no siw; the host built this one for this kernel.
        insmod "$CTL/siw.ko" || fail "insmod siw.ko failed (built for $(uname -r)?)"
        rdma link add siw0 type siw netdev eth0 || fail "rdma link add siw0 type siw netdev eth0 failed"
        dev=siw0 ;;
esac
devs=$dev
if [ -n "${FS_ADDR2:-}" ]; then
    dev2=${dev%0}1
    rdma link add "$dev2" type "$FS_RDMA" netdev eth1 || fail "rdma link add $dev2 type $FS_RDMA netdev eth1 failed"
    devs="$dev,$dev2"
fi
for d in $(echo "$devs" | tr , ' '); do
    port_active() { grep -q ACTIVE "/sys/class/infiniband/$d/ports/1/state"; }
    wait_for 15 port_active || fail "$d port 1 not ACTIVE after 15 s: $(cat /sys/class/infiniband/$d/ports/1/state)"
done
say "stage:rdma:$devs"

# Two guests: a launcher (mpirun's rsh agent, hydra's ssh launcher) starts ranks in the other
# guest over ssh. The host made a key pair for this run only (ssh_key, ssh_key.pub); dropbear
# serves it with a host key made here (ed25519: instant even under TCG). Root logs in by key only.
if [ -r "$CTL/ssh_key" ]; then
    mkdir -p /root/.ssh /etc/dropbear && chmod 700 /root/.ssh
    cp "$CTL/ssh_key" /root/.ssh/id_ed25519 && chmod 600 /root/.ssh/id_ed25519
    cp "$CTL/ssh_key.pub" /root/.ssh/authorized_keys && chmod 600 /root/.ssh/authorized_keys
    # The peer's host key is new every boot and the link is private to the two qemu processes.
    printf '%s\n' "Host *" "  StrictHostKeyChecking no" "  UserKnownHostsFile /dev/null" \
        "  LogLevel ERROR" "  BatchMode yes" "  ConnectTimeout 30" > /root/.ssh/config
    dropbearkey -t ed25519 -f /etc/dropbear/dropbear_ed25519_host_key >/dev/null 2>&1 \
        || fail "dropbearkey could not make the ssh host key"
    dropbear -s -r /etc/dropbear/dropbear_ed25519_host_key -p 22 \
        || fail "dropbear (the ssh server for the launcher) did not start"
    say "stage:ssh"
fi

if [ -r "$CTL/fabscope.deb" ]; then
    # run --package: the packaged fabscope (/usr/bin) instead of the tree on the share. The image has
    # the package's Depends, so dpkg needs no network.
    dpkg -i "$CTL/fabscope.deb" > /tmp/fabscope-dpkg.log 2>&1 \
        || fail "dpkg -i of the fabscope package failed: $(tail -3 /tmp/fabscope-dpkg.log | tr '\n@' '  ')"
    say "stage:package"
else
# fabscope on PATH, running the host's code from the read-only share.
cat > /usr/local/bin/fabscope <<'EOF'
#!/bin/sh
export PYTHONPATH="/fabscope/python${PYTHONPATH:+:$PYTHONPATH}"
export PYTHONPYCACHEPREFIX="${PYTHONPYCACHEPREFIX:-/tmp/fabscope-pycache}"
exec python3 -m fabscope "$@"
EOF
cat > /usr/local/bin/fabscope-engine <<EOF
#!/bin/sh
e="/fabscope/$FS_ENGINE"
if [ ! -x "\$e" ]; then
    echo "fabscope-engine: \$e not found in the guest: build the engine on the host first (make);" >&2
    echo "the guest runs the host's build from the read-only share /fabscope." >&2
    exit 127
fi
exec "\$e" "\$@"
EOF
chmod 0755 /usr/local/bin/fabscope /usr/local/bin/fabscope-engine
export FABSCOPE_ENGINE="/fabscope/$FS_ENGINE"
fi
export FABSCOPE_TESTBED=softroce FABSCOPE_ROLE="$FS_ROLE" FABSCOPE_PEER="$FS_PEER_ADDR"
export FABSCOPE_RDMA_DEV="$dev" FABSCOPE_RDMA_DEVS="$devs" FABSCOPE_OUT=/out
# Bytecode in the guest's tmpfs: the share is read-only, so without a cache every python3 start
# compiled fabscope's modules again (cProfile in a guest: 0.48 s of a 2.3 s `fabscope run`, under
# TCG). Compiled once per boot here, then read back by every later command.
export PYTHONPYCACHEPREFIX=/tmp/fabscope-pycache
# What the middleware needs on rxe here (found with the peer tools; testbed/softroce/README.md,
# "UCX, libfabric and MPI over rxe between the two guests"):
# - UCX 1.13's UD drops every datagram rxe delivers through an IPv4-mapped RoCE v2 GID (both ends
#   keep resending their connection request until "UD endpoint ... unhandled timeout error"); through
#   the link-local IPv6 GID (index 0) it works. rc_verbs needs UD for its wire-up, so both use GID 0.
# - libfabric 1.17's ofi_rxm sizes each verbs CQ as (tx + rx size) x FI_UNIVERSE_SIZE (default 256):
#   more than rxe's max_cqe (32767), so fi_enable fails with -22 (fi_pingpong too). Two peers need 32.
# A command that sets its own (env UCX_IB_GID_INDEX=1 ...) overrides them; fabscope's mpirun
# forwards UCX_* and FI_* to the ranks in the other guest (an ssh session there does not have them).
export UCX_IB_GID_INDEX="${UCX_IB_GID_INDEX:-0}" FI_UNIVERSE_SIZE="${FI_UNIVERSE_SIZE:-32}"

say "ready:$(cut -d' ' -f1 /proc/uptime)"

# Two-guest client: the host creates `go` once the server guest said its command listens.
if [ "$FS_WAIT_GO" = 1 ]; then
    wait_for "$FS_GO_TIMEOUT" test -e "$CTL/go" || fail "no go from the host within $FS_GO_TIMEOUT s"
fi

cd /out
say "begin"
/bin/sh "$CTL/cmd.sh" < /dev/null &
cmd_pid=$!
if [ "$FS_REPORT_LISTEN" = 1 ]; then
    # Two-guest server: say when the command (or a process below it) listens, polled at 5 Hz for at
    # most FS_LISTEN_TIMEOUT s or until it exits; the host starts the client on this line.
    (
        n=$(( FS_LISTEN_TIMEOUT * 5 ))
        while [ "$n" -gt 0 ] && kill -0 "$cmd_pid" 2>/dev/null; do
            if found=$(sh "$CTL/listening.sh" "$cmd_pid"); then
                say "listening:$found"
                break
            fi
            n=$(( n - 1 ))
            sleep 0.2
        done
    ) < /dev/null &
fi
wait "$cmd_pid"
rc=$?
# A command whose last line has no newline would swallow the marker's start.
echo
echo "$rc" > "$CTL/rc.tmp" && mv "$CTL/rc.tmp" "$CTL/rc"
say "exit:$rc"

if [ "$FS_KEEP_ALIVE" = 1 ]; then
    # Server role: stay up (link and peer intact) until the host stops us.
    while :; do sleep 3600; done
fi
poweroff_now
