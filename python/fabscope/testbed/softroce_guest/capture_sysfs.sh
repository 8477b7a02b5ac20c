#!/bin/sh
# SPDX-License-Identifier: BSD-3-Clause
# Copy the real sysfs layout of rxe0 and eth0 into $1 (a directory on /out),
# for the doctor's fixtures. Symlinks are resolved: the device directory's
# regular files are copied under sys/class/..., the links are listed in
# symlinks.txt. Only GID indexes 0-7 are read: under TCG each of the 1024 GID
# files costs a noticeable moment, and entries past the used ones are empty.
#
# With a second argument PEER (two-guest mode, an ib_write_bw server waiting
# on PEER), the counters are copied to $1/counters-before/ first, then
# `ib_write_bw` moves a known payload to PEER, then the full copy is taken:
# the fixture's counters then show real RoCE traffic on both rxe0 and eth0.
set -u
dest=$1
peer=${2:-}
ib=/sys/class/infiniband/rxe0
net=/sys/class/net/eth0
mkdir -p "$dest/commands"
: > "$dest/unreadable.txt"

# copy SRC DST: one sysfs file; files the kernel refuses to read are listed.
copy() {
    mkdir -p "$(dirname "$2")"
    if ! cat "$1" > "$2" 2>/dev/null; then
        rm -f "$2"
        echo "${1}: $(cat "$1" 2>&1 >/dev/null | sed 's/.*: //')" >> "$dest/unreadable.txt"
    fi
}

# copy_dir SRC DST: the regular files directly in SRC (no recursion).
copy_dir() {
    for f in "$1"/*; do
        [ -f "$f" ] && [ ! -L "$f" ] && [ -r "$f" ] && copy "$f" "$2/${f##*/}"
    done
}

# counters_to ROOT: just the traffic counters (rxe hw_counters, eth0 statistics).
counters_to() {
    copy_dir "$ib/ports/1/hw_counters" "$1/sys/class/infiniband/rxe0/ports/1/hw_counters"
    copy_dir "$net/statistics" "$1/sys/class/net/eth0/statistics"
}

if [ -n "$peer" ]; then
    counters_to "$dest/counters-before"
    # Known payload: 500 RDMA writes of 64 KiB = 32768000 bytes, GID index 1 (RoCE v2, IPv4).
    echo "\$ ib_write_bw -d rxe0 -x 1 -F -n 500 -s 65536 $peer" > "$dest/commands/ib_write_bw.txt"
    ib_write_bw -d rxe0 -x 1 -F -n 500 -s 65536 "$peer" >> "$dest/commands/ib_write_bw.txt" 2>&1 \
        || { cat "$dest/commands/ib_write_bw.txt"; exit 1; }
fi

ibd="$dest/sys/class/infiniband/rxe0"
copy_dir "$ib" "$ibd"
p=$ib/ports/1
pd=$ibd/ports/1
copy_dir "$p" "$pd"
for i in 0 1 2 3 4 5 6 7; do
    copy "$p/gids/$i" "$pd/gids/$i"
    copy "$p/gid_attrs/types/$i" "$pd/gid_attrs/types/$i"
    copy "$p/gid_attrs/ndevs/$i" "$pd/gid_attrs/ndevs/$i"
done
for sub in counters hw_counters; do
    [ -d "$p/$sub" ] && copy_dir "$p/$sub" "$pd/$sub"
done
[ -d "$ib/hw_counters" ] && copy_dir "$ib/hw_counters" "$ibd/hw_counters"
[ -d "$ib/power" ] && copy_dir "$ib/power" "$ibd/power"

nd="$dest/sys/class/net/eth0"
for f in mtu speed duplex operstate carrier address broadcast type ifindex iflink \
         addr_len dev_id dev_port flags tx_queue_len link_mode name_assign_type; do
    [ -e "$net/$f" ] && copy "$net/$f" "$nd/$f"
done
copy_dir "$net/statistics" "$nd/statistics"

# uverbs character device entry: which ibdev it serves, ABI version.
for u in /sys/class/infiniband_verbs/uverbs*; do
    [ -d "$u" ] || continue
    copy_dir "$u" "$dest/sys/class/infiniband_verbs/${u##*/}"
done
[ -f /sys/class/infiniband_verbs/abi_version ] && \
    copy /sys/class/infiniband_verbs/abi_version "$dest/sys/class/infiniband_verbs/abi_version"

{
    for l in "$ib" "$net" "$net/device" "$ib/device" /sys/class/infiniband_verbs/uverbs*; do
        [ -L "$l" ] && echo "$l -> $(readlink "$l")  (readlink -f: $(readlink -f "$l"))"
    done
} > "$dest/symlinks.txt"

ibv_devinfo -v > "$dest/commands/ibv_devinfo-v.txt" 2>&1
ibv_devices > "$dest/commands/ibv_devices.txt" 2>&1
rdma link show > "$dest/commands/rdma-link-show.txt" 2>&1
rdma dev show > "$dest/commands/rdma-dev-show.txt" 2>&1
ip -d addr show eth0 > "$dest/commands/ip-d-addr-show-eth0.txt" 2>&1
uname -a > "$dest/commands/uname-a.txt"

{
    echo "guest kernel: $(uname -r)"
    echo "guest uname:  $(uname -a)"
    echo "guest date:   $(date -u '+%Y-%m-%d %H:%M:%S UTC') (guest clock)"
    echo "rdma-core:    $(dpkg-query -W -f '${Version}' rdma-core 2>/dev/null)"
    echo "source paths: $ib -> $(readlink -f "$ib"), $net -> $(readlink -f "$net")"
    echo "files:        $(find "$dest/sys" -type f | wc -l)"
} > "$dest/capture-info.txt"
cat "$dest/capture-info.txt"
