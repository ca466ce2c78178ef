#!/bin/sh
# Trims an NCCL log for these test cases: drops the topology printout, the tuning tables,
# buffer/handle bookkeeping and sysfs probing lines; every other line stays as NCCL wrote it.
# --no-p2p (one-host case) also drops the send/recv (connIndex 1) connections and Send/Recv calls.
#   usage: trim.sh [--no-p2p] LOG > TRIMMED
noise='NCCL INFO (GPU/|NET/[0-9]+-[0-9]+ :| *\+ |=== System|=====|CPU/[0-9]|UDS converted|transport/p2p\.cc|.*\| *$| *[0-9]+ : (NET|GPU)/|Could not get speed|Could not find real path|Topology detection|ncclTopoPopulateNics|TOPO/NET|.*GPU Direct RDMA Disabled)'
p2p='NCCL INFO (Channel [0-9]+/1 :|(Send|Recv): opCount)'
if [ "$1" = "--no-p2p" ]; then
    grep -v -E "$noise" "$2" | grep -v -E "$p2p"
else
    grep -v -E "$noise" "$1"
fi
