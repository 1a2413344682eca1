#!/usr/bin/env bash
# tun-lab.sh [all|up|run|down|status]: the TUN mode example pair, end to end, on one Linux host.
#
# Builds five network namespaces joined by veth pairs (jumbo MTU), with `ip` only:
#
#   client 198.18.1.10 --ea/la-- gateway A --va/wa-- WAN router --wb/vb-- gateway B --lb/eb-- server 198.18.2.10
#                         la 198.18.1.1, va 198.18.10.1   wa 198.18.10.2 | wb 198.18.20.2   vb 198.18.20.1, lb 198.18.2.1
#
# sets up each gateway's policy routing with deploy/tun/crem-tun-routing and
# deploy/examples/tun-a.env, tun-b.env (plus CREM_SITE_IF: the endpoints sit behind the gateway),
# puts a token bucket (tc tbf) on the WAN router's link toward site B so that the path drops
# packets, starts `crem gateway` in gateway A and B from deploy/examples/tun-a.toml and
# tun-b.toml, and a `crem perf serve` in the server namespace. `run` moves byte-verified RDMA
# WRITEs from the client to the server with `crem perf write`, reads both gateways' counters
# from their metrics (bash's /dev/tcp: no curl needed) and prints a verdict line:
#
#   PASS: N packets restored, 0 ICRC mismatches, every byte verified
#
# Commands:
#   all      (the default) up, run, down; down runs also on failure and on Ctrl-C
#   up       build everything and start the gateways and the server (a previous lab is taken
#            down first: it may be run again)
#   run      the perf transfers, the counters, the verdict (exit 0 on PASS, 1 on FAIL)
#   status   each gateway's counters now
#   down     stop the processes and delete the namespaces (the logs and captures stay)
#
# Settings (environment):
#   CREM               the crem binary; default: built from this tree with `go build` when go
#                      is found, else `crem` on PATH
#   CREM_LAB_PREFIX    namespace names PREFIX-client, -gwa, -wan, -gwb, -server (crem-lab)
#   CREM_LAB_DIR       logs, captures, pids, the crem built (/tmp/PREFIX)
#   CREM_LAB_RUNS      perf transfers in `run` (3), each CREM_LAB_ITERS messages (8) of
#                      CREM_LAB_SIZE (1MiB), at CREM_LAB_RATE (200Mbit)
#   CREM_LAB_DELAY     in-process one-way delay of each endpoint (5ms): the RDMA transport's
#                      recovery takes that round trip, the gateways' repair only the WAN's
#   CREM_LAB_WAN       the WAN router's token bucket toward site B, as tc-tbf takes it
#                      ("rate 300mbit burst 32k limit 128k"): the sender's bursts and the
#                      repair beside them overflow it, 5 to 25 percent of a transfer's
#                      packets in bursts; "off" for none (then
#                      nothing is lost and nothing restored)
#   CREM_LAB_PERF_FLAGS  more flags for `crem perf write`
#   CREM_LAB_VERIFY    how the gateways check restored packets (--tun-verify): logical
#   CREM_LAB_EXAMPLES  the directory of tun-a.toml, tun-b.toml, tun-a.env, tun-b.env
#                      (deploy/examples; deploy/tun/reporter-lab.sh gives its own copies)
#
# The endpoints are the project's own transport (`crem perf` on kernel sockets), which seals the
# ICRC under its logical header (IPv4 Identification 0) while the kernel numbers the packets it
# sends: the gateways run the shipped tun-a.toml and tun-b.toml as they are, with
# `--tun-verify logical` (RoCE NICs seal under the real header: tun.verify = "template", the
# files' setting). The restored packets' UDP source port comes from the flows' own packets.
# Needs root, iproute2 (ip, tc), /dev/net/tun and bash.
set -euo pipefail

prog=tun-lab.sh
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
examples=${CREM_LAB_EXAMPLES:-$repo/deploy/examples}
routing=$here/crem-tun-routing

P=${CREM_LAB_PREFIX:-crem-lab}
dir=${CREM_LAB_DIR:-${TMPDIR:-/tmp}/$P}
runs=${CREM_LAB_RUNS:-3}
iters=${CREM_LAB_ITERS:-8}
size=${CREM_LAB_SIZE:-1MiB}
rate=${CREM_LAB_RATE:-200Mbit}
delay=${CREM_LAB_DELAY:-5ms}
wan=${CREM_LAB_WAN:-rate 300mbit burst 32k limit 128k}
ns_client=$P-client ns_gwa=$P-gwa ns_wan=$P-wan ns_gwb=$P-gwb ns_server=$P-server
all_ns="$ns_client $ns_gwa $ns_wan $ns_gwb $ns_server"
client=198.18.1.10 server=198.18.2.10
setup_port=18515
metrics_port=9100 # metrics_address of tun-a.toml and tun-b.toml, each in its namespace
# The endpoints are crem perf, which seals the ICRC under its logical header (C12): the gateways
# check restored packets under it. "template" checks as RoCE NICs need, and fails them all.
verify_flag="--tun-verify ${CREM_LAB_VERIFY:-logical}"

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
# must runs a command and names it when it fails.
must() {
	local out
	if ! out=$("$@" 2>&1); then
		printf '%s: failed: %s\n%s\n' "$prog" "$*" "$out" >&2
		return 1
	fi
}

check_host() {
	[ "$(id -u)" = 0 ] || die "needs root (network namespaces, TUN devices, raw sockets): run it with sudo"
	command -v ip >/dev/null || die "needs ip(8) (Debian and Ubuntu: apt-get install iproute2)"
	[ -c /dev/net/tun ] || die "needs /dev/net/tun (modprobe tun; in a container: --device /dev/net/tun)"
	if [ "$wan" != off ]; then
		command -v tc >/dev/null || die "needs tc(8) for the WAN token bucket (iproute2), or CREM_LAB_WAN=off"
	fi
	[ -r "$examples/tun-a.toml" ] || die "no $examples/tun-a.toml: run the script from a crem source tree"
}

# find_crem sets crem: $CREM, or a build of this tree, or crem on PATH.
find_crem() {
	if [ -n "${CREM:-}" ]; then
		crem=$CREM
	elif command -v go >/dev/null && [ -f "$repo/cmd/crem/main.go" ]; then
		mkdir -p "$dir"
		say "building crem from $repo (go build ./cmd/crem)"
		(cd "$repo" && CGO_ENABLED=0 go build -o "$dir/crem" ./cmd/crem) || die "go build ./cmd/crem failed"
		crem=$dir/crem
	elif command -v crem >/dev/null; then
		crem=$(command -v crem)
	else
		die "no crem: set CREM=/path/to/crem, install Go to build it, or put crem on PATH"
	fi
	[ -x "$crem" ] || die "$crem is not an executable crem"
	crem=$(cd "$(dirname "$crem")" && pwd)/$(basename "$crem")
}

# metrics prints the Prometheus text of the gateway in namespace $1 (HTTP/1.0 over bash's
# /dev/tcp, so that no curl or wget is needed).
metrics() {
	in_ns "$1" bash -c 'exec 3<>/dev/tcp/127.0.0.1/'"$metrics_port"' || exit 1
		printf "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n" >&3
		tr -d "\r" <&3' 2>/dev/null
}
# metric NAME < metrics: the sum of the samples of NAME (0 if none).
metric() { awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { printf "%d\n", s }'; }

wait_log() { # file, line, seconds
	local i
	for ((i = 0; i < $3 * 10; i++)); do
		grep -q "$2" "$1" 2>/dev/null && return 0
		sleep 0.1
	done
	return 1
}

# start NS NAME CMD...: runs CMD in NS in the background, its output to NAME.log, its pid to
# NAME.pid (the pid of crem itself: ip netns exec execs it).
start() {
	local ns=$1 name=$2
	shift 2
	setsid ip netns exec "$ns" "$@" >"$dir/$name.log" 2>&1 </dev/null &
	echo $! >"$dir/$name.pid"
}

stop() { # NAME: SIGTERM, then SIGKILL after 5 s
	local f=$dir/$1.pid pid i
	[ -f "$f" ] || return 0
	pid=$(cat "$f")
	rm -f "$f"
	kill -0 "$pid" 2>/dev/null || return 0
	kill -TERM "$pid" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		kill -0 "$pid" 2>/dev/null || return 0
		sleep 0.1
	done
	kill -KILL "$pid" 2>/dev/null || true
}

cmd_down() {
	local ns any=
	for n in perf-server gateway-a gateway-b; do stop "$n"; done
	for ns in $all_ns; do
		if ip netns list 2>/dev/null | awk '{print $1}' | grep -qx "$ns"; then
			ip netns del "$ns" 2>/dev/null || true
			any=1
		fi
	done
	[ -n "$any" ] && say "down: namespaces $P-* removed; logs and captures in $dir" || true
}

# site NS LETTER: a gateway namespace's routing, from the shipped tun-LETTER.env and the
# routing script.
site_routing() {
	local ns=$1 env=$examples/tun-$2.env site_if=$3
	# shellcheck disable=SC2046
	in_ns "$ns" env $(grep -E '^[A-Z_]+=' "$env") CREM_SITE_IF="$site_if" sh "$routing" up
}

cmd_up() {
	check_host
	find_crem
	cmd_down >/dev/null
	mkdir -p "$dir"
	rm -f "$dir"/*.log "$dir"/*.pcap
	echo "$crem" >"$dir/crem.path"

	step "1. five namespaces: $all_ns"
	for ns in $all_ns; do
		must ip netns add "$ns"
		must in_ns "$ns" ip link set lo up
		must in_ns "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.default.rp_filter=0
	done

	step "2. links (veth pairs, MTU 9000) and addresses"
	link() { # nsX ifX nsY ifY
		must ip link add "$2" mtu 9000 netns "$1" type veth peer name "$4" mtu 9000 netns "$3"
		must in_ns "$1" ip link set "$2" up
		must in_ns "$3" ip link set "$4" up
	}
	link "$ns_client" ea "$ns_gwa" la
	link "$ns_gwa" va "$ns_wan" wa
	link "$ns_wan" wb "$ns_gwb" vb
	link "$ns_gwb" lb "$ns_server" eb
	must in_ns "$ns_client" ip addr add $client/24 dev ea
	must in_ns "$ns_client" ip route add default via 198.18.1.1
	must in_ns "$ns_gwa" ip addr add 198.18.1.1/24 dev la
	must in_ns "$ns_gwa" ip addr add 198.18.10.1/24 dev va
	must in_ns "$ns_gwa" ip route add 198.18.20.0/24 via 198.18.10.2
	must in_ns "$ns_wan" ip addr add 198.18.10.2/24 dev wa
	must in_ns "$ns_wan" ip addr add 198.18.20.2/24 dev wb
	must in_ns "$ns_wan" sysctl -qw net.ipv4.ip_forward=1
	must in_ns "$ns_wan" ip route add 198.18.1.0/24 via 198.18.10.1
	must in_ns "$ns_wan" ip route add 198.18.2.0/24 via 198.18.20.1
	must in_ns "$ns_gwb" ip addr add 198.18.2.1/24 dev lb
	must in_ns "$ns_gwb" ip addr add 198.18.20.1/24 dev vb
	must in_ns "$ns_gwb" ip route add 198.18.10.0/24 via 198.18.20.2
	must in_ns "$ns_server" ip addr add $server/24 dev eb
	must in_ns "$ns_server" ip route add default via 198.18.2.1
	say "gateway A reaches gateway B across the WAN: $(in_ns "$ns_gwa" ip route get 198.18.20.1 | head -1)"

	step "3. policy routing of each gateway (deploy/tun/crem-tun-routing with tun-a.env, tun-b.env)"
	must site_routing "$ns_gwa" a la
	must site_routing "$ns_gwb" b lb
	must in_ns "$ns_gwa" ip link set cremA txqueuelen 10000
	must in_ns "$ns_gwb" ip link set cremB txqueuelen 10000
	say "gateway A, ip rule:"
	in_ns "$ns_gwa" ip rule | sed 's/^/    /'
	say "gateway A, the client's packet to the server: $(in_ns "$ns_gwa" ip route get $server from $client iif la | head -1)"
	say "gateway B, a packet from the WAN for the server: $(in_ns "$ns_gwb" ip route get $server from $client iif vb | head -1)"
	say "gateway B, its own delivery to the server:      $(in_ns "$ns_gwb" ip route get $server mark 0x43 | head -1)"

	step "4. the WAN's token bucket toward site B"
	if [ "$wan" != off ]; then
		# shellcheck disable=SC2086
		must in_ns "$ns_wan" tc qdisc add dev wb root tbf $wan
		say "$(in_ns "$ns_wan" tc qdisc show dev wb)"
	else
		say "none (CREM_LAB_WAN=off)"
	fi

	step "5. the gateways, from deploy/examples/tun-a.toml and tun-b.toml"
	for g in a b; do
		"$crem" gateway --check-config "$examples/tun-$g.toml" $verify_flag >/dev/null ||
			die "tun-$g.toml: --check-config failed"
	done
	# shellcheck disable=SC2086
	start "$ns_gwb" gateway-b "$crem" gateway --config "$examples/tun-b.toml" $verify_flag --pcap "$dir/gateway-b.pcap"
	# shellcheck disable=SC2086
	start "$ns_gwa" gateway-a "$crem" gateway --config "$examples/tun-a.toml" $verify_flag --pcap "$dir/gateway-a.pcap"
	for g in a b; do
		wait_log "$dir/gateway-$g.log" 'gateway running' 15 || {
			cat "$dir/gateway-$g.log" >&2
			die "gateway $g did not start (log above)"
		}
		say "gateway $g: $(grep -m1 'gateway running' "$dir/gateway-$g.log")"
	done
	local m
	m=$(metrics "$ns_gwa") || die "no metrics from gateway A on 127.0.0.1:$metrics_port"
	say "gateway A's metrics answer: crem_gateway_flows $(metric crem_gateway_flows <<<"$m")"

	step "6. the perf server in the server namespace"
	start "$ns_server" perf-server "$crem" perf serve --listen $server:$setup_port
	wait_log "$dir/perf-server.log" 'setup on' 15 || {
		cat "$dir/perf-server.log" >&2
		die "crem perf serve did not start (log above)"
	}
	say "$(grep -m1 'setup on' "$dir/perf-server.log")"
	say ""
	say "up: the lab runs; next: $0 run (then $0 down)"
}

# counters prints a gateway's counters, one line.
counters() { # NS NAME
	local m
	m=$(metrics "$1") || {
		say "gateway $2: no metrics"
		return
	}
	printf 'gateway %s: csf_sources %d repair_sent %d retx_sent %d | crf_sources %d repairs %d restored %d icrc_mismatch %d abandoned %d\n' "$2" \
		"$(metric crem_csf_sources_total <<<"$m")" "$(metric crem_csf_repair_sent_total <<<"$m")" \
		"$(metric crem_csf_retx_sent_total <<<"$m")" "$(metric crem_crf_flows_sources_total <<<"$m")" \
		"$(metric crem_crf_flows_repairs_total <<<"$m")" "$(metric crem_crf_flows_restored_total <<<"$m")" \
		"$(metric crem_crf_flows_icrc_mismatch_total <<<"$m")" "$(metric crem_crf_flows_abandoned_total <<<"$m")"
}

cmd_status() {
	local q
	if q=$(in_ns "$ns_wan" tc -s qdisc show dev wb 2>/dev/null) && [[ $q =~ dropped\ ([0-9]+) ]]; then
		say "WAN toward site B: the token bucket dropped ${BASH_REMATCH[1]} packets (RoCEv2, repair and all)"
	fi
	counters "$ns_gwa" A
	counters "$ns_gwb" B
}

cmd_run() {
	check_host
	[ -f "$dir/gateway-a.pid" ] && [ -f "$dir/gateway-b.pid" ] || die "the lab is not up: $0 up"
	[ -n "${crem:-}" ] || crem=${CREM:-$(cat "$dir/crem.path" 2>/dev/null || true)}
	[ -n "$crem" ] && [ -x "$crem" ] || die "no crem binary (${crem:-none}): set CREM"
	local i out verified=0 failed=0 ma mb restored mismatch
	step "7. crem perf write from the client to the server, through both gateways ($runs runs)"
	for ((i = 1; i <= runs; i++)); do
		# shellcheck disable=SC2086
		if out=$(in_ns "$ns_client" "$crem" perf write --server $server:$setup_port --size "$size" --iters "$iters" \
			--mtu 4096 --rate "$rate" --delay "$delay" --mode tcaeth --table crem ${CREM_LAB_PERF_FLAGS:-} 2>&1); then
			verified=$((verified + 1))
		else
			failed=$((failed + 1))
		fi
		say "run $i:"
		printf '%s\n' "$out" | sed 's/^/    /'
	done

	step "8. the gateways' counters"
	cmd_status
	ma=$(metrics "$ns_gwa" || true)
	mb=$(metrics "$ns_gwb" || true)
	restored=$(($(metric crem_crf_flows_restored_total <<<"$ma") + $(metric crem_crf_flows_restored_total <<<"$mb")))
	mismatch=$(($(metric crem_crf_flows_icrc_mismatch_total <<<"$ma") + $(metric crem_crf_flows_icrc_mismatch_total <<<"$mb")))
	say ""
	if [ "$failed" = 0 ] && [ "$restored" -gt 0 ] && [ "$mismatch" = 0 ]; then
		say "PASS: $restored packets restored, 0 ICRC mismatches, every byte verified ($verified of $runs transfers)"
		return 0
	fi
	local why=""
	[ "$failed" = 0 ] || why="$failed of $runs transfers failed; "
	if [ "$mismatch" != 0 ]; then
		why+="restored packets failed their ICRC check: the gateways check under another header than the endpoints sealed (tun.verify, docs/user-guide.md); "
	elif [ "$restored" = 0 ]; then
		why+="nothing restored: did the WAN lose anything? (ip netns exec $ns_wan tc -s qdisc show dev wb); "
	fi
	say "FAIL: ${why}restored $restored, ICRC mismatches $mismatch (logs and captures in $dir)"
	return 1
}

cmd_all() {
	check_host
	# Whatever ends the script (a failure, Ctrl-C, SIGTERM) takes the lab down.
	trap 'cmd_down' EXIT
	trap 'echo; echo "$prog: interrupted; taking the lab down" >&2; exit 130' INT
	trap 'echo "$prog: terminated; taking the lab down" >&2; exit 143' TERM
	local start=$SECONDS rc=0
	cmd_up
	cmd_run || rc=$?
	step "9. down"
	for g in a b; do
		stop gateway-$g
		say "gateway $g: $(grep -m1 'gateway stopped' "$dir/gateway-$g.log" | sed 's/.*msg="gateway stopped" //')"
	done
	cmd_down
	trap - EXIT INT TERM
	say "$((SECONDS - start)) s"
	return $rc
}

case ${1:-all} in
all) cmd_all ;;
up)
	check_host
	# A failure or an interruption half way takes down what was built.
	trap 'echo "$prog: up did not finish; taking the lab down" >&2; cmd_down' EXIT
	trap 'exit 130' INT
	trap 'exit 143' TERM
	cmd_up
	trap - EXIT INT TERM
	;;
run) cmd_run ;;
status) cmd_status ;;
down) cmd_down ;;
-h | --help | help) sed -n '2,/^set -euo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//' ;;
*)
	echo "usage: $prog [all|up|run|status|down] (settings: $prog --help)" >&2
	exit 2
	;;
esac
