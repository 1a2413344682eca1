#!/usr/bin/env bash
# reporter-rtt.sh [RTT]: what a path reporter saves on a long path, measured. A relay-mode
# gateway pair whose WAN crosses a Linux router with a token bucket (the queue that drops) and
# `crem reporter` on it, the WAN's round trip made by crem netem (this kernel may have no netem
# qdisc). Pairs of transfers, one without the reporter and one with it (the daemon stopped and
# started between them), and gateway B's histogram of block recovery times
# (crem_crf_block_recovery_seconds, protocol notes PR18) read before and after each transfer.
#
#   client, gateway A --a0/r0-- router (tbf on r1, crem reporter) --r1/m0-- WAN (crem netem) --m1/b0-- gateway B, server
#     nsA 10.79.0.1, .0.2, 10.79.1.1     nsR 10.79.1.2 | 10.79.2.2          nsM 10.79.2.1 | 10.79.3.1   nsB 10.79.3.2, 10.79.4.2, .4.1
#
# The round trip RTT (default 20ms) lies between the router and gateway B: two crem netem
# proxies, RTT/2 each way, one for CREM messages and one for relayed data (so that the router
# sees the data on their own port, 4792, and only them: the reporter watches that port). The
# reports cross a third proxy, in the router's namespace, of RTT/2 one way to gateway A: a report
# then reaches A as late as from a router in the middle of a path of round trip RTT (with the
# reporter, the time to A plus A's repair to the router is RTT/2 either way; without it, B's
# request and the answer take the whole RTT; PR20). Gateway A lists the proxy's address (the
# router's 10.79.1.2) among its reporters.
#
# Output: per transfer the perf row, then the figures and the verdict lines
#
#   RECOVERY: beyond_m blocks without the reporter N1, median M1 ms (R1 RTT); with it N2,
#             median M2 ms (R2 RTT); saved S ms = F RTT (WAN RTT T ms)
#   EARLY: beyond_m blocks restored within 0.75 RTT of their gap (B ms): without the reporter
#          E1 of N1, with it E2 of N2
#   PASS or FAIL: ...
#
# EARLY counts the blocks restored sooner than a request round can restore one: a recovery time
# runs from the gap gateway B saw (PR18), and B's REPAIR_REQUEST and the coded retransmission
# take the whole round trip after it, so without the reporter no block is restored within
# 1 RTT; with it, a report's repair leaves A when the drop is RTT/2 old, about when B sees the gap,
# and arrives RTT/2 later. B is the largest histogram bound at or below EARLY_RTT (0.75) RTT.
#
# PASS wants every transfer verified, every packet the router's queue dropped while the
# reporter ran matched by its program (tc's counter), every RoCEv2 datagram among them named by
# PSN, reports taken by gateway A, extra repair sent, and blocks beyond m in both halves. The
# comparisons are the caller's (deploy.TestReporterSavesRecoveryRTT).
#
# The sender runs 10 percent above the token bucket's rate, and the relay's batches meet a queue
# of 32 KiB: the queue drops a quarter of the datagrams or more, in bursts, and with m = 2 of
# k = 32 most blocks that lose lose more than their m. At that loss the CSF's circuit breaker
# (C11 f: over 10 percent for a second) opens in most transfers and holds m at zero for the
# rest of it, with or without the reporter; the medians of RECOVERY move with where in a
# transfer it opens (docs/performance.md). By default (QUEUE_FOR=data) only the relayed data
# cross the token bucket, CREM's messages passing beside it (a class of their own), so that the
# comparison measures the report's round and not the chance of the repair: with QUEUE_FOR=all
# they share the queue and its drops, which the router does not report (it names RoCEv2
# datagrams only), and a block whose own or extra repair the queue dropped too waits for the
# request round with or without the reporter.
#
# Environment: CREM (default: built from this tree), PREFIX (namespace names, crem-rtt), PAIRS
# (3), SIZE (1MiB), ITERS (8), RATE (110Mbit), MTU (1024), QUEUE (the router's tbf, "rate
# 100mbit burst 8k limit 32k"), QUEUE_FOR (data or all), K and M (32, 2; fixed, not adapted),
# REORDER (the RDMA sender's reorder window, 20 x RTT: the transport leaves recovery to CREM;
# its own retransmissions add load to a full queue and drops with it, noise in either half),
# EARLY_RTT (0.75, the EARLY line's bound in RTTs), REPAIR_FRACTION (the gateways' repair
# budget, 4: the default 0.5 refuses repair of either half), KEEP (a directory for the logs and
# every transfer's metrics, else a temporary one). Needs root, ip and tc (iproute2), a kernel
# with BTF.
# Exit status 0 PASS, 1 FAIL, 2 when something could not start.
set -u

RTT=${1:-20ms}
P=${PREFIX:-crem-rtt}
PAIRS=${PAIRS:-3}
SIZE=${SIZE:-1MiB}
ITERS=${ITERS:-8}
RATE=${RATE:-110Mbit}
MTU=${MTU:-1024}
QUEUE=${QUEUE:-rate 100mbit burst 8k limit 32k}
K=${K:-32}
M=${M:-2}
CREM_PORT=61234 DATA_PORT=4792 ROCE_PORT=4791 SETUP_PORT=18515 METRICS_PORT=9100 REPORTER_METRICS=9101
CLIENT=10.79.0.1 GWA_LOCAL=10.79.0.2 GWA=10.79.1.1 ROUTER_A=10.79.1.2 ROUTER_B=10.79.2.2
WANA=10.79.2.1 WANB=10.79.3.1 GWB=10.79.3.2 SERVER=10.79.4.1 GWB_LOCAL=10.79.4.2 REPORT_PROXY=10.79.9.1
nsA=$P-a nsR=$P-r nsM=$P-m nsB=$P-b

die() {
	echo "reporter-rtt: $*" >&2
	exit 2
}
[ "$(id -u)" = 0 ] || die "needs root (network namespaces, eBPF)"
command -v ip >/dev/null && command -v tc >/dev/null || die "needs ip and tc (iproute2)"
[ -r /sys/kernel/btf/vmlinux ] || die "needs a kernel with BTF (/sys/kernel/btf/vmlinux) for crem reporter"

rtt_us=$(awk -v d="$RTT" 'BEGIN {
	n = d + 0; u = d; sub(/^[0-9.]+/, "", u)
	m = (u == "ms") ? 1000 : (u == "s") ? 1000000 : (u == "us") ? 1 : -1
	if (m < 0 || n <= 0) { print "bad"; exit } printf "%d", n * m }')
[ "$rtt_us" != bad ] || die "RTT $RTT: want a duration such as 20ms"
HALF="$((rtt_us / 2))us"
REORDER=${REORDER:-$((20 * rtt_us))us}

if [ -n "${KEEP:-}" ]; then
	DIR=$KEEP
	mkdir -p "$DIR" || exit 2
else
	DIR=$(mktemp -d "${TMPDIR:-/tmp}/reporter-rtt.XXXXXX") || exit 2
fi

pids=()
reporter_pid=
cleanup() {
	[ -n "$reporter_pid" ] && kill -TERM "$reporter_pid" 2>/dev/null
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}" $reporter_pid; do wait "$p" 2>/dev/null; done
	pids=()
	for ns in $nsA $nsR $nsM $nsB; do ip netns del "$ns" 2>/dev/null; done
	[ -z "${KEEP:-}" ] && rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

if [ -z "${CREM:-}" ]; then
	repo=$(cd "$(dirname "$0")/.." && pwd)
	command -v go >/dev/null || die "no crem: set CREM, or install Go to build it"
	(cd "$repo" && CGO_ENABLED=0 go build -o "$DIR/crem" ./cmd/crem) || die "go build ./cmd/crem failed"
	CREM=$DIR/crem
fi

in_ns() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@"
}
must() { "$@" >/dev/null 2>&1 || die "failed: $*"; }

# The namespaces, their links and routes.
for ns in $nsA $nsR $nsM $nsB; do
	ip netns del "$ns" 2>/dev/null
	must ip netns add "$ns"
	must in_ns "$ns" ip link set lo up
	must in_ns "$ns" sysctl -qw net.ipv4.ip_forward=1
done
link() { # nsX ifX addrX nsY ifY addrY
	must ip link add "$2" netns "$1" type veth peer name "$5" netns "$4"
	must in_ns "$1" ip addr add "$3/24" dev "$2"
	must in_ns "$4" ip addr add "$6/24" dev "$5"
	must in_ns "$1" ip link set "$2" up
	must in_ns "$4" ip link set "$5" up
}
link "$nsA" a0 $GWA "$nsR" r0 $ROUTER_A
link "$nsR" r1 $ROUTER_B "$nsM" m0 $WANA
link "$nsM" m1 $WANB "$nsB" b0 $GWB
must in_ns "$nsA" ip addr add $CLIENT/32 dev lo
must in_ns "$nsA" ip addr add $GWA_LOCAL/32 dev lo
must in_ns "$nsB" ip addr add $SERVER/32 dev lo
must in_ns "$nsB" ip addr add $GWB_LOCAL/32 dev lo
must in_ns "$nsR" ip addr add $REPORT_PROXY/32 dev lo
must in_ns "$nsA" ip route add default via $ROUTER_A
must in_ns "$nsR" ip route add 10.79.0.0/24 via $GWA
must in_ns "$nsR" ip route add default via $WANA
must in_ns "$nsM" ip route add 10.79.0.0/22 via $ROUTER_B
must in_ns "$nsM" ip route add 10.79.4.0/24 via $GWB
must in_ns "$nsB" ip route add default via $WANB
# The queue that drops: the router's token bucket toward gateway B, for the relayed data alone
# (QUEUE_FOR=data: CREM's messages pass beside it in a class of their own), or for everything.
if [ "${QUEUE_FOR:-data}" = data ]; then
	must in_ns "$nsR" tc qdisc add dev r1 root handle 1: htb default 20
	must in_ns "$nsR" tc class add dev r1 parent 1: classid 1:20 htb rate 10gbit
	must in_ns "$nsR" tc class add dev r1 parent 1: classid 1:10 htb rate 10gbit
	# shellcheck disable=SC2086 # QUEUE is tc's words
	must in_ns "$nsR" tc qdisc add dev r1 parent 1:10 handle 10: tbf $QUEUE
	must in_ns "$nsR" tc filter add dev r1 parent 1: protocol ip u32 match ip dport $DATA_PORT 0xffff flowid 1:10
else
	# shellcheck disable=SC2086 # QUEUE is tc's words
	must in_ns "$nsR" tc qdisc add dev r1 root tbf $QUEUE
fi

gateway_config() { # NAME SELF PEER LISTEN TARGET LOCAL_EP REMOTE_EP REPORTERS
	cat >"$DIR/gateway-$1.toml" <<EOF
crem_address    = "$2:$CREM_PORT"
domain_protection = "boundary"
peer            = "$3:$CREM_PORT"
mode            = "relay"
log_level       = "info"
shards          = 1
metrics_address = "127.0.0.1:$METRICS_PORT"
reporters       = [$8]

[relay]
listen          = "$4:$ROCE_PORT"
target          = "$5:$ROCE_PORT"
wan_listen      = "$2:$DATA_PORT"
peer_data       = "$3:$DATA_PORT"
local_endpoint  = "$6"
remote_endpoint = "$7"

[[protect]]
src      = "$CLIENT"
dst      = "$SERVER"
src_port = $ROCE_PORT
ordered  = false

[[protect]]
src      = "$SERVER"
dst      = "$CLIENT"
src_port = $ROCE_PORT
ordered  = false

[policy]
k               = $K
m               = $M
adapt           = false
repair_fraction = ${REPAIR_FRACTION:-4}
initial_rtt     = "$RTT"
max_open_blocks = 256
rdma_mtu        = $MTU
EOF
}
gateway_config a $GWA $WANA $GWA_LOCAL $CLIENT $CLIENT $SERVER "\"$ROUTER_A\""
gateway_config b $GWB $WANB $GWB_LOCAL $SERVER $SERVER $CLIENT ""
cat >"$DIR/reporter.toml" <<EOF
node_id         = 2
crem_port       = $CREM_PORT
devices         = ["r1"]
udp_ports       = [$DATA_PORT]
metrics_address = "127.0.0.1:$REPORTER_METRICS"
# The reports of gateway A's flows cross the proxy of RTT/2 to A.
[[routes]]
prefix = "$GWA/32"
csf    = "$REPORT_PROXY"
EOF
for g in a b; do
	$CREM gateway --check-config "$DIR/gateway-$g.toml" >/dev/null 2>"$DIR/check-$g.err" || {
		cat "$DIR/check-$g.err" >&2
		die "gateway $g's configuration does not check"
	}
done
in_ns "$nsR" "$CREM" reporter --check-config "$DIR/reporter.toml" >/dev/null 2>"$DIR/check-r.err" || {
	cat "$DIR/check-r.err" >&2
	die "the reporter's configuration does not check"
}

start() { # NAME NS ARGS...
	local name=$1 ns=$2
	shift 2
	ip netns exec "$ns" "$@" >"$DIR/$name.out" 2>"$DIR/$name.err" &
	pids+=($!)
}
proxy() { # NAME NS LISTEN FORWARD DELAY
	start "netem-$1" "$2" "$CREM" netem --listen "$3" --forward "$4" --delay "$5" --queue 100000
}
proxy ab-crem "$nsM" $WANA:$CREM_PORT $GWB:$CREM_PORT $HALF
proxy ab-data "$nsM" $WANA:$DATA_PORT $GWB:$DATA_PORT $HALF
proxy ba-crem "$nsM" $WANB:$CREM_PORT $GWA:$CREM_PORT $HALF
proxy ba-data "$nsM" $WANB:$DATA_PORT $GWA:$DATA_PORT $HALF
proxy reports "$nsR" $REPORT_PROXY:$CREM_PORT $GWA:$CREM_PORT $HALF
start gateway-a "$nsA" "$CREM" gateway --config "$DIR/gateway-a.toml"
start gateway-b "$nsB" "$CREM" gateway --config "$DIR/gateway-b.toml"
start server "$nsB" "$CREM" perf serve --listen $SERVER:$SETUP_PORT --port $ROCE_PORT --via $GWB_LOCAL:$ROCE_PORT

ready() {
	local f
	for f in ab-crem ab-data ba-crem ba-data reports; do
		grep -q "listening on" "$DIR/netem-$f.err" || return 1
	done
	grep -q "gateway running" "$DIR/gateway-a.err" && grep -q "gateway running" "$DIR/gateway-b.err" &&
		grep -q "setup on" "$DIR/server.err"
}
for _ in $(seq 200); do
	ready && break
	sleep 0.05
done
ready || {
	tail -n 5 "$DIR"/*.err >&2
	die "the processes did not start within 10 s (logs above)"
}

# metrics NS PORT: the Prometheus text served in NS on 127.0.0.1:PORT (bash's /dev/tcp).
metrics() {
	in_ns "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$2"' || exit 1
		printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
		tr -d "\r" <&3' 2>/dev/null
}
metric() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%d\n", s }'; }
# hist CLASS < metrics: the recovery histogram of CLASS, "le cumulative-count" a line.
hist() {
	awk -v c="$1" 'index($1, "crem_crf_block_recovery_seconds_bucket{class=\"" c "\"") == 1 {
		match($1, /le="[^"]*"/); print substr($1, RSTART + 4, RLENGTH - 5), $2 }'
}
# hist_add ACC BEFORE AFTER: adds AFTER - BEFORE to histogram file ACC (missing: zero).
hist_add() {
	awk 'FILENAME == ARGV[1] { acc[$1] = $2; next } FILENAME == ARGV[2] { b[$1] = $2; next }
		{ printf "%s %d\n", $1, acc[$1] + $2 - b[$1] }' "$1" "$2" "$3" >"$1.new"
	mv "$1.new" "$1"
}
# early ACC SECONDS: the blocks of a histogram file restored within SECONDS (the cumulative count
# at the largest bound at or below it) and that bound in ms.
early() {
	awk -v s="$2" '$1 != "+Inf" && $1 + 0 <= s + 0 { n = $2; b = $1 } END { printf "%d %.2f\n", n, b * 1000 }' "$1"
}
# median ACC: "count median-ms" of a histogram file, linear within the bucket ("0 -" if empty).
median() {
	awk '{ le[NR] = $1; c[NR] = $2 } END {
		n = c[NR]; if (NR == 0 || n == 0) { print "0 -"; exit }
		r = n / 2; prev = 0; lo = 0
		for (i = 1; i <= NR; i++) {
			if (c[i] >= r && c[i] > prev) {
				hi = (le[i] == "+Inf") ? lo : le[i]
				printf "%d %.2f\n", n, (lo + (r - prev) / (c[i] - prev) * (hi - lo)) * 1000; exit
			}
			prev = c[i]; if (le[i] != "+Inf") lo = le[i]
		}
	}' "$1"
}
reporter_start() {
	ip netns exec "$nsR" "$CREM" reporter --config "$DIR/reporter.toml" >>"$DIR/reporter.log" 2>&1 &
	reporter_pid=$!
	for _ in $(seq 100); do
		[ "$(grep -c 'msg=reporting' "$DIR/reporter.log")" -ge "$1" ] && return 0
		kill -0 "$reporter_pid" 2>/dev/null || break
		sleep 0.05
	done
	tail -n 5 "$DIR/reporter.log" >&2
	die "crem reporter did not start"
}
reporter_stop() {
	kill -TERM "$reporter_pid" 2>/dev/null
	wait "$reporter_pid" 2>/dev/null
	reporter_pid=
}
queue_dropped() {
	local q
	# The token bucket's own counter (under an htb, its child).
	in_ns "$nsR" tc -s qdisc show dev r1 | awk '/^qdisc/ { tbf = $2 == "tbf" }
		tbf && match($0, /dropped [0-9]+/) { print substr($0, RSTART + 8, RLENGTH - 8) + 0; found = 1; exit }
		END { if (!found) print 0 }'
}

echo "reporter-rtt: WAN RTT $RTT (RTT/2 each way between the router and gateway B, RTT/2 for the reports to A), router queue: tbf $QUEUE for ${QUEUE_FOR:-data}, $PAIRS pairs of $ITERS x $SIZE at $RATE, k $K m $M, reorder window $REORDER; files in $DIR"
for c in beyond_m within_m; do
	metrics "$nsB" $METRICS_PORT | hist $c >"$DIR/before.$c"
	[ -s "$DIR/before.$c" ] || die "gateway B exports no crem_crf_block_recovery_seconds"
	for ph in off on; do awk '{ print $1, 0 }' "$DIR/before.$c" >"$DIR/acc.$c.$ph"; done
done
failed=0 runs=0 on_dropped=0 roce=0 named=0 other=0 matched=0 reports=0 starts=0
for ((i = 1; i <= PAIRS; i++)); do
	for ph in off on; do
		if [ $ph = on ]; then
			starts=$((starts + 1))
			reporter_start $starts
			d0=$(queue_dropped)
		fi
		runs=$((runs + 1))
		# shellcheck disable=SC2086
		if ! in_ns "$nsA" "$CREM" perf write --server $SERVER:$SETUP_PORT --bind $CLIENT --via $GWA_LOCAL:$ROCE_PORT \
			--port $ROCE_PORT --mode tcaeth --rate "$RATE" --size "$SIZE" --iters "$ITERS" --mtu "$MTU" \
			--seed "$runs" --reorder-window "$REORDER" --retry-count 100 >"$DIR/perf-$runs.out" 2>"$DIR/perf-$runs.err"; then
			failed=$((failed + 1))
		fi
		printf 'pair %d, reporter %-3s %s\n' "$i" $ph "$(awk 'f { print; exit } /^#bytes +#iters/ { f = 1 }' "$DIR/perf-$runs.out")"
		mb=$(metrics "$nsB" $METRICS_PORT)
		printf '%s\n' "$mb" >"$DIR/gateway-b.$runs.metrics"
		metrics "$nsA" $METRICS_PORT >"$DIR/gateway-a.$runs.metrics"
		echo "$(queue_dropped)" >"$DIR/queue.$runs"
		for c in beyond_m within_m; do
			hist $c <<<"$mb" >"$DIR/after.$c"
			hist_add "$DIR/acc.$c.$ph" "$DIR/before.$c" "$DIR/after.$c"
			mv "$DIR/after.$c" "$DIR/before.$c"
		done
		if [ $ph = on ]; then
			mr=$(metrics "$nsR" $REPORTER_METRICS)
			on_dropped=$((on_dropped + $(queue_dropped) - d0))
			roce=$((roce + $(metric crem_reporter_drops_total <<<"$mr")))
			named=$((named + $(metric crem_reporter_psns_named_total <<<"$mr")))
			other=$((other + $(metric crem_reporter_drops_not_roce_total <<<"$mr")))
			matched=$((matched + $(metric crem_reporter_drops_matched_total <<<"$mr")))
			reports=$((reports + $(metric crem_reporter_reports_sent_total <<<"$mr")))
			reporter_stop
		fi
	done
done

ma=$(metrics "$nsA" $METRICS_PORT)
mb=$(metrics "$nsB" $METRICS_PORT)
printf '%s\n' "$ma" >"$DIR/gateway-a.metrics"
printf '%s\n' "$mb" >"$DIR/gateway-b.metrics"
sources=$(metric crem_csf_sources_total <<<"$ma")
repair=$(metric crem_csf_repair_sent_total <<<"$ma")
extra=$(metric crem_csf_extra_sent_total <<<"$ma")
taken=$(metric crem_csf_path_reports_total <<<"$ma")
requests=$(metric crem_csf_requests_received_total <<<"$ma")
echo "packets_sent=$sources"
echo "queue_dropped=$(queue_dropped)"
echo "queue_dropped_with_reporter=$on_dropped"
echo "reporter_roce_drops=$roce"
echo "reporter_psns_named=$named"
echo "reporter_other_drops=$other"
echo "reporter_matched_packets=$matched"
echo "reports_sent=$reports"
echo "reports_taken_by_a=$taken"
echo "repair_sent=$repair"
echo "extra_repair_sent=$extra"
echo "repair_requests=$requests"
echo "restored=$(metric crem_crf_flows_restored_total <<<"$mb")"
for c in within_m beyond_m; do
	for ph in off on; do
		read -r n med < <(median "$DIR/acc.$c.$ph")
		echo "${c}_${ph}_blocks=$n"
		echo "${c}_${ph}_median_ms=$med"
	done
done
rtt_ms=$(awk -v u="$rtt_us" 'BEGIN { printf "%.2f", u / 1000 }')
read -r n_off off < <(median "$DIR/acc.beyond_m.off")
read -r n_on on < <(median "$DIR/acc.beyond_m.on")
if [ "$off" != - ] && [ "$on" != - ]; then
	awk -v a="$off" -v b="$on" -v na="$n_off" -v nb="$n_on" -v r="$rtt_ms" 'BEGIN {
		printf "RECOVERY: beyond_m blocks without the reporter %d, median %.2f ms (%.2f RTT); with it %d, median %.2f ms (%.2f RTT); saved %.2f ms = %.2f RTT (WAN RTT %.2f ms)\n",
			na, a, a / r, nb, b, b / r, a - b, (a - b) / r, r }'
fi
early_s=$(awk -v u="$rtt_us" -v f="${EARLY_RTT:-0.75}" 'BEGIN { printf "%.6f", u * f / 1e6 }')
read -r e_off bound < <(early "$DIR/acc.beyond_m.off" "$early_s")
read -r e_on _ < <(early "$DIR/acc.beyond_m.on" "$early_s")
echo "EARLY: beyond_m blocks restored within ${EARLY_RTT:-0.75} RTT of their gap ($bound ms): without the reporter $e_off of $n_off, with it $e_on of $n_on"
why=""
[ "$failed" = 0 ] || why+="$failed of $runs transfers failed; "
[ "$roce" -gt 0 ] && [ "$named" = "$roce" ] && [ "$matched" = "$on_dropped" ] ||
	why+="the queue dropped $on_dropped packets while the reporter ran, it matched $matched: $roce RoCEv2 datagrams (named $named) and $other others; "
[ "$taken" -gt 0 ] && [ "$extra" -gt 0 ] || why+="gateway A took $taken reports, sent $extra extra symbols; "
[ "$n_off" -gt 0 ] && [ "$n_on" -gt 0 ] || why+="beyond_m blocks: $n_off without the reporter, $n_on with it; "
if [ -z "$why" ]; then
	echo "PASS: $runs transfers verified; the queue dropped $on_dropped packets while the reporter ran, every one matched ($roce RoCEv2 datagrams, every one named, $other others); A took $taken reports and sent $extra extra symbols"
	exit 0
fi
echo "FAIL: ${why}files in $DIR"
[ -n "${KEEP:-}" ] || KEEP=$DIR # keep the logs of a failure
exit 1
