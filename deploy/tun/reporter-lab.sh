#!/usr/bin/env bash
# reporter-lab.sh [all|up|run|down|status]: the TUN lab (tun-lab.sh) with a path reporter on its
# WAN router: `crem reporter` watches the router's token bucket toward site B and reports every
# RoCEv2 datagram it drops, PSN by PSN, to the flow's source; gateway A takes the report off the
# path (TUN mode) and its CSF sends extra repair for the block at once (C16), before gateway B's
# CRF has noticed the loss.
#
#   client --[gateway A]-- va/wa --[WAN router: tbf on wb + crem reporter]-- wb/vb --[gateway B]-- server
#
# The gateways run copies of deploy/examples/tun-a.toml and tun-b.toml in which gateway A lists
# the WAN router (198.18.10.2) among its reporters (C14); the reporter runs
# deploy/examples/reporter.toml's settings for this lab (device wb, source 198.18.10.2, the
# gateways' CREM port). `run` does tun-lab.sh's transfers and verdict, then reads the reporter's
# and gateway A's counters and prints a second verdict line:
#
#   PASS: the WAN queue dropped D packets; the reporter named N PSNs in R reports; gateway A's
#         CSF took P reports and sent E extra repair symbols
#
# The verdict also wants every drop of the WAN queue accounted: the reporter's RoCEv2 drops and
# the other datagrams it saw dropped there (repair, CREM messages) add up to tc's counter.
#
# Commands: as tun-lab.sh (all, the default: up, run, down). Settings: tun-lab.sh's (CREM,
# CREM_LAB_*), with CREM_LAB_PREFIX crem-rlab and CREM_LAB_WAN "rate 200mbit burst 16k limit
# 32k" by default. Needs what tun-lab.sh needs, and a kernel with BTF (/sys/kernel/btf/vmlinux)
# for the reporter's eBPF program.
set -euo pipefail

prog=reporter-lab.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export CREM_LAB_PREFIX=${CREM_LAB_PREFIX:-crem-rlab}
P=$CREM_LAB_PREFIX
dir=${CREM_LAB_DIR:-${TMPDIR:-/tmp}/$P}
export CREM_LAB_DIR=$dir CREM_LAB_EXAMPLES=$dir/examples
# A bucket that the sender and its repair overflow in bursts: drops beyond a block's m, which
# the CSF answers with extra repair (drops that m covers need none).
export CREM_LAB_WAN=${CREM_LAB_WAN:-rate 200mbit burst 16k limit 32k}
ns_wan=$P-wan ns_gwa=$P-gwa
reporter_addr=198.18.10.2
reporter_metrics=9101
lab=$here/tun-lab.sh

say() { printf '%s\n' "$*"; }
step() { printf '\n== %s\n' "$*"; }
die() {
	printf '%s: %s\n' "$prog" "$*" >&2
	exit 2
}
in_ns() {
	local ns=$1
	shift
	ip netns exec "$ns" "$@"
}
# metrics NS PORT: the Prometheus text served in NS on 127.0.0.1:PORT (bash's /dev/tcp).
metrics() {
	in_ns "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$2"' || exit 1
		printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
		tr -d "\r" <&3' 2>/dev/null
}
metric() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%d\n", s }'; }

# examples writes the lab's copies of the TUN pair's files: gateway A lists the reporter.
examples() {
	[ -r /sys/kernel/btf/vmlinux ] || die "needs a kernel with BTF (/sys/kernel/btf/vmlinux) for crem reporter"
	mkdir -p "$dir/examples"
	cp "$repo"/deploy/examples/tun-{a,b}.{toml,env} "$dir/examples/"
	# A top-level key goes before the first table.
	awk -v r="$reporter_addr" '!done && /^\[/ { print "reporters = [\"" r "\"]\n"; done = 1 } { print }' \
		"$repo/deploy/examples/tun-a.toml" >"$dir/examples/tun-a.toml"
	local port
	port=$(sed -n 's/^crem_address *= *"[^"]*:\([0-9]*\)".*/\1/p' "$dir/examples/tun-a.toml")
	cat >"$dir/reporter.toml" <<TOML
# The WAN router of $prog (deploy/examples/reporter.toml explains every field).
node_id         = 2
crem_port       = $port
devices         = ["wb"]
udp_ports       = [4791]
source_address  = "$reporter_addr"
metrics_address = "127.0.0.1:$reporter_metrics"
TOML
}

cmd_up() {
	examples
	"$lab" up
	local crem
	crem=$(cat "$dir/crem.path")
	step "6b. the path reporter on the WAN router (device wb, reports from $reporter_addr)"
	in_ns "$ns_wan" "$crem" reporter --check-config "$dir/reporter.toml" >/dev/null || die "the reporter's configuration does not check"
	setsid ip netns exec "$ns_wan" "$crem" reporter --config "$dir/reporter.toml" >"$dir/reporter.log" 2>&1 </dev/null &
	echo $! >"$dir/reporter.pid"
	local i
	for ((i = 0; i < 100; i++)); do
		grep -q 'msg=reporting' "$dir/reporter.log" 2>/dev/null && break
		kill -0 "$(cat "$dir/reporter.pid")" 2>/dev/null || break
		sleep 0.1
	done
	grep -q 'msg=reporting' "$dir/reporter.log" || {
		cat "$dir/reporter.log" >&2
		die "crem reporter did not start"
	}
	say "$(grep -m1 'msg=reporting' "$dir/reporter.log" | sed 's/.*msg=reporting //')"
}

cmd_run() {
	[ -f "$dir/reporter.pid" ] || die "the lab is not up: $0 up"
	local rc=0 mr ma q dropped=0 named reports unreadable accepted extra roce other
	"$lab" run || rc=$?
	step "8b. the path reporter and gateway A's CSF"
	mr=$(metrics "$ns_wan" "$reporter_metrics" || true)
	ma=$(metrics "$ns_gwa" 9100 || true)
	if q=$(in_ns "$ns_wan" tc -s qdisc show dev wb 2>/dev/null) && [[ $q =~ dropped\ ([0-9]+) ]]; then
		dropped=${BASH_REMATCH[1]}
	fi
	named=$(metric crem_reporter_psns_named_total <<<"$mr")
	roce=$(metric crem_reporter_drops_total <<<"$mr")
	other=$(metric crem_reporter_drops_not_roce_total <<<"$mr")
	reports=$(metric crem_reporter_reports_sent_total <<<"$mr")
	unreadable=$(metric crem_reporter_drops_unreadable_total <<<"$mr")
	accepted=$(metric crem_csf_path_reports_total <<<"$ma")
	extra=$(metric crem_csf_extra_sent_total <<<"$ma")
	say "reporter: RoCEv2 drops $roce, PSNs named $named, unnamed $(metric crem_reporter_drops_unnamed_total <<<"$mr"), unreadable $unreadable, other drops $other, reports $reports, rate-limited $(metric crem_reporter_reports_rate_limited_total <<<"$mr"), ring events lost $(metric crem_reporter_ring_events_lost_total <<<"$mr")"
	say "gateway A: path reports intercepted $(metric crem_gateway_path_reports_intercepted_total <<<"$ma"), accepted $accepted, rejected $(metric crem_csf_path_reports_rejected_total <<<"$ma"), dropped PSNs named $(metric crem_csf_path_report_drops_total <<<"$ma"), extra repair sent $extra"
	say ""
	if [ "$rc" = 0 ] && [ "$named" -gt 0 ] && [ "$named" = "$roce" ] && [ $((roce + other)) = "$dropped" ] &&
		[ "$accepted" -gt 0 ] && [ "$extra" -gt 0 ]; then
		say "PASS: the WAN queue dropped $dropped packets ($roce RoCEv2, every one named, and $other others); the reporter sent $reports reports; gateway A's CSF took $accepted and sent $extra extra repair symbols"
		return 0
	fi
	say "FAIL: transfers $([ "$rc" = 0 ] && echo passed || echo failed); WAN drops $dropped, RoCEv2 $roce (named $named), others $other, reports $reports, accepted by gateway A $accepted, extra repair $extra (logs in $dir)"
	return 1
}

cmd_down() {
	local pid i
	if [ -f "$dir/reporter.pid" ]; then
		pid=$(cat "$dir/reporter.pid")
		rm -f "$dir/reporter.pid"
		kill -TERM "$pid" 2>/dev/null || true
		for ((i = 0; i < 50; i++)); do
			kill -0 "$pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -KILL "$pid" 2>/dev/null || true
		grep -m1 'msg=stopped' "$dir/reporter.log" 2>/dev/null | sed 's/.*msg=stopped /reporter stopped: /' || true
	fi
	"$lab" down
}

cmd_all() {
	trap 'cmd_down' EXIT
	trap 'echo "$prog: interrupted; taking the lab down" >&2; exit 130' INT
	trap 'echo "$prog: terminated; taking the lab down" >&2; exit 143' TERM
	local rc=0
	cmd_up
	cmd_run || rc=$?
	step "9. down"
	cmd_down
	trap - EXIT INT TERM
	return $rc
}

case ${1:-all} in
all) cmd_all ;;
up) cmd_up ;;
run) cmd_run ;;
status) "$lab" status ;;
down) cmd_down ;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
*)
	echo "usage: $prog [all|up|run|status|down] (settings: $prog --help)" >&2
	exit 2
	;;
esac
