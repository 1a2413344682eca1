#!/bin/sh
# netns-forwarding.sh [BASELINE_REF]: the forwarding benchmark of the TUN data path, as root.
#
# Builds crem from this tree (and, given a git ref such as main, crem from that ref too), then
# runs cmd/crem.TestNetnsForwarding: a chain of four network namespaces (sender -> gateway A ->
# WAN veth -> gateway B -> receiver) forwarding RoCEv2 RDMA WRITE packets, measured in turns
# with the gateway hosts as plain kernel routers and as CREM gateways in TUN mode (k = 32, m = 4)
# on the TUN device (write = raw, write = device) and on the xdp data path (tun.datapath = xdp:
# the 4 KiB packets cross in two AF_XDP frames each, multi-buffer, on Linux 6.6 and later;
# before, every configuration forwards 2 KiB packets over links of MTU 3000, which one frame
# holds, and the log says so). It prints, per run
# and as ranges, the packets per second delivered, the CPU per delivered packet (CPU time of the
# chain's processes plus the machine's softirq time) and the ratio of CREM's packet rate to the
# kernel's, and one line per data path:
#   forwarding mode=raw|device|xdp pps=N kernel_pps=M ratio=R cpu_us_per_pkt=C
#
# Settings (environment): CREM_NETNS_RUNS (3), CREM_NETNS_SECONDS (3),
# CREM_NETNS_GATEWAY_FLAGS (e.g. "--tun-offload off", for this tree's gateways only),
# CREM_NETNS_XDP_ATTACH (driver or generic XDP for the xdp data path; driver on veth by default).
# Needs root, iproute2, /dev/net/tun, Go, and for the xdp data path Linux 5.9 with BPF. The namespaces are the test's (crem-f{s,a,b,r,w,x}-PID)
# and are removed when it ends; any left by a killed run are removed here.
set -eu

repo=$(cd "$(dirname "$0")/.." && pwd)
tmp=$(mktemp -d)
cleanup() {
	rm -rf "$tmp"
	# Namespaces of runs that did not end (killed): their test process is gone.
	for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E '^crem-f[sabrwx]-[0-9]+$' || true); do
		pid=${ns##*-}
		kill -0 "$pid" 2>/dev/null || ip netns del "$ns" 2>/dev/null || true
	done
}
trap cleanup EXIT INT TERM

if [ "$(id -u)" != 0 ]; then
	echo "netns-forwarding.sh: needs root (network namespaces, TUN devices)" >&2
	exit 2
fi
cd "$repo"
go build -o "$tmp/crem" ./cmd/crem
if [ -n "${1:-}" ]; then
	mkdir "$tmp/base"
	git archive "$1" | tar -x -C "$tmp/base"
	(cd "$tmp/base" && go build -o "$tmp/crem-base" ./cmd/crem)
	export CREM_NETNS_BASELINE="$tmp/crem-base"
fi
CREM_NETNS_BENCH=1 CREM_NETNS_CREM="$tmp/crem" go test ./cmd/crem -run '^TestNetnsForwarding$' -count=1 -v -timeout 60m 2>&1 |
	grep -v '^        time='
