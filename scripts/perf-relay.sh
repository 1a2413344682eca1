#!/usr/bin/env bash
# perf-relay.sh: crem perf through a relay-mode gateway pair, with crem netem as the WAN, on
# loopback. No privileges, no tools beyond bash, awk, grep and sed.
#
#   client BASE.1 --> [gateway A] BASE.2 ==> WAN ends BASE.3 | BASE.4 (crem netem) ==> [gateway B] BASE.5 --> server BASE.6
#
# The client (crem perf write --via) sends its RoCEv2 datagrams to gateway A's relay.listen, the
# server (crem perf serve --via) to gateway B's; the setup exchange goes straight from client to
# server, so the client starts with the WAN's RTT unknown. Two crem netem proxies make the WAN,
# one per direction, each with the same delay (RTT/2) and loss: A sends its CREM messages and its
# relayed data to the WAN end BASE.3 (peer and peer_data are both BASE.3:CREM_PORT), which
# carries both through one queue to B's crem_address and wan_listen (--route); B sends its own to
# BASE.4, which carries them to A. CREM's REPAIR so crosses the same delay, loss and queue as the
# data it protects, in order. A gateway binds each flow to the address its HELLO or HELLO_ACK
# came from; the proxy sends the answers to a HELLO back through the socket the HELLO left by,
# so each end sees one address per flow (protocol notes R36).
#
# Usage: scripts/perf-relay.sh [RTT] [LOSS]        (defaults 20ms, 0.01)
# Environment:
#   CREM        the crem command (default: built from this tree with go build when go is
#               found, else crem on PATH)
#   BASE        the first three octets of the loopback addresses (default 127.0.42)
#   CREM_PORT   the domain's CREM port (default 61234), SETUP_PORT the server's setup port (default
#               18515), ROCE_PORT the endpoints' and relays' RoCE port (default 4791), WAN_PORT the
#               relayed data's port between the gateways (default 4792), METRICS_PORT the
#               gateways' /metrics (default 9100; saved in the directory when curl is there)
#   MODE        gbn, sr or tcaeth (default tcaeth); RATE (default 100Mbit), SIZE (default 1MiB),
#               ITERS (default 16), MTU (default 1024), SEED (default 1), REORDER the senders'
#               reorder window (default 5ms: longer than CREM takes to restore a lost packet)
#   PERF_ARGS   more flags for crem perf write (--retry-count 100, ...)
#   SERVE_ARGS  more flags for crem perf serve (--pcap FILE, ...)
#   KEEP        a directory to keep the configurations and logs in (default: a temporary one,
#               removed at the end)
# Output: the figures (KEY=VALUE lines) and a verdict line, PASS or FAIL; exit status 0 for PASS,
# 1 for FAIL, 2 when something could not start.
set -u

RTT=${1:-20ms}
LOSS=${2:-0.01}
BASE=${BASE:-127.0.42}
CREM_PORT=${CREM_PORT:-61234}
SETUP_PORT=${SETUP_PORT:-18515}
ROCE_PORT=${ROCE_PORT:-4791}
WAN_PORT=${WAN_PORT:-4792}
METRICS_PORT=${METRICS_PORT:-9100}
MODE=${MODE:-tcaeth}
RATE=${RATE:-100Mbit}
SIZE=${SIZE:-1MiB}
ITERS=${ITERS:-16}
MTU=${MTU:-1024}
REORDER=${REORDER:-5ms}
SEED=${SEED:-1}
PERF_ARGS=${PERF_ARGS:-}
SERVE_ARGS=${SERVE_ARGS:-}

CLIENT=$BASE.1 GWA=$BASE.2 WANA=$BASE.3 WANB=$BASE.4 GWB=$BASE.5 SERVER=$BASE.6

# The one-way delay: half the RTT, in microseconds (crem netem takes Go durations).
rtt_us=$(awk -v d="$RTT" 'BEGIN {
	n = d + 0; u = d; sub(/^[0-9.]+/, "", u)
	m = (u == "ms") ? 1000 : (u == "s") ? 1000000 : (u == "us" || u == "µs") ? 1 : -1
	if (m < 0 || n <= 0) { print "bad"; exit } printf "%d", n * m }')
if [ "$rtt_us" = bad ]; then
	echo "perf-relay: RTT $RTT: want a duration such as 20ms" >&2
	exit 2
fi
DELAY="$((rtt_us / 2))us"

if [ -n "${KEEP:-}" ]; then
	DIR=$KEEP
	mkdir -p "$DIR" || exit 2
else
	DIR=$(mktemp -d "${TMPDIR:-/tmp}/perf-relay.XXXXXX") || exit 2
fi

pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
	pids=()
	[ -z "${KEEP:-}" ] && rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# The crem command: CREM, else built from this tree when go is there, else crem on PATH.
if [ -z "${CREM:-}" ]; then
	repo=$(cd "$(dirname "$0")/.." && pwd)
	if command -v go >/dev/null 2>&1 && [ -f "$repo/cmd/crem/main.go" ]; then
		echo "perf-relay: building crem from $repo (go build ./cmd/crem)" >&2
		(cd "$repo" && CGO_ENABLED=0 go build -o "$DIR/crem" ./cmd/crem) || { echo "perf-relay: go build ./cmd/crem failed" >&2; exit 2; }
		CREM=$DIR/crem
	elif command -v crem >/dev/null 2>&1; then
		CREM=crem
	else
		echo "perf-relay: no crem: set CREM, or run from the source tree with go installed" >&2
		exit 2
	fi
fi

ORDERED=false # selective repeat and T/C AETH receivers take packets out of order
[ "$MODE" = gbn ] && ORDERED=true

# gateway_config NAME SELF WAN_END TARGET LOCAL_EP REMOTE_EP: the configuration of one gateway.
gateway_config() {
	cat >"$DIR/gateway-$1.toml" <<EOF
# crem gateway $1 of scripts/perf-relay.sh: relay mode on loopback.
crem_address = "$2:$CREM_PORT"
peer         = "$3:$CREM_PORT"
mode         = "relay"
log_level    = "info"
shards       = 1
metrics_address = "$2:$METRICS_PORT"

[relay]
listen          = "$2:$ROCE_PORT"
target          = "$4:$ROCE_PORT"
wan_listen      = "$2:$WAN_PORT"
peer_data       = "$3:$CREM_PORT"
local_endpoint  = "$5"
remote_endpoint = "$6"

[[protect]]
src      = "$CLIENT"
dst      = "$SERVER"
src_port = $ROCE_PORT
ordered  = $ORDERED

[[protect]]
src      = "$SERVER"
dst      = "$CLIENT"
src_port = $ROCE_PORT
ordered  = $ORDERED

[policy]
k               = 32
m               = 4
initial_rtt     = "$RTT"
max_open_blocks = 256
# The flows' own RDMA MTU: another one makes the CSF start its session again once it sees the
# flow's (E33), a HELLO round later.
rdma_mtu        = $MTU
EOF
}
gateway_config a "$GWA" "$WANA" "$CLIENT" "$CLIENT" "$SERVER"
gateway_config b "$GWB" "$WANB" "$SERVER" "$SERVER" "$CLIENT"

start() { # start NAME ARGS...: a background process, its output in DIR/NAME.out and .err
	local name=$1
	shift
	"$@" >"$DIR/$name.out" 2>"$DIR/$name.err" &
	pids+=($!)
}

for g in a b; do
	if ! $CREM gateway --check-config "$DIR/gateway-$g.toml" >/dev/null 2>"$DIR/check-$g.err"; then
		echo "perf-relay: gateway $g's configuration:" >&2
		cat "$DIR/check-$g.err" >&2
		exit 2
	fi
done

# The WAN: A's end listens on WANA, B's on WANB; the same delay and loss both ways, each
# direction with its own seeds.
netem() { # netem NAME LISTEN FROM_GATEWAY TO_GATEWAY SEED
	start "netem-$1" $CREM netem --listen "$2:$CREM_PORT" --forward "$4:$CREM_PORT" \
		--route "$3:$WAN_PORT=$4:$WAN_PORT" --delay "$DELAY" --loss "$LOSS" --seed "$5" \
		--queue 100000 --drop-log "$DIR/netem-$1.drops"
}
netem ab "$WANA" "$GWA" "$GWB" $((SEED * 4 + 1))
netem ba "$WANB" "$GWB" "$GWA" $((SEED * 4 + 3))
start gateway-a $CREM gateway --config "$DIR/gateway-a.toml"
start gateway-b $CREM gateway --config "$DIR/gateway-b.toml"
start server $CREM perf serve --listen "$SERVER:$SETUP_PORT" --port "$ROCE_PORT" --via "$GWB:$ROCE_PORT" $SERVE_ARGS

# Ready: every proxy listening, both gateways running, the server serving.
ready() {
	local f
	for f in netem-ab netem-ba; do
		grep -q "listening on" "$DIR/$f.err" || return 1
	done
	grep -q "gateway running" "$DIR/gateway-a.err" && grep -q "gateway running" "$DIR/gateway-b.err" &&
		grep -q "setup on" "$DIR/server.err"
}
for _ in $(seq 200); do
	ready && break
	for p in "${pids[@]}"; do
		if ! kill -0 "$p" 2>/dev/null; then
			echo "perf-relay: a process ended before the run; its output is in $DIR" >&2
			tail -n 5 "$DIR"/*.err >&2
			exit 2
		fi
	done
	sleep 0.05
done
if ! ready; then
	echo "perf-relay: the processes did not start within 10 s" >&2
	tail -n 5 "$DIR"/*.err >&2
	exit 2
fi

echo "perf-relay: RTT $RTT (one way $DELAY), loss $LOSS, mode $MODE, rate $RATE, $ITERS x $SIZE, reorder window $REORDER; files in $DIR"
# shellcheck disable=SC2086 # PERF_ARGS is a list of flags
$CREM perf write --server "$SERVER:$SETUP_PORT" --bind "$CLIENT" --via "$GWA:$ROCE_PORT" --port "$ROCE_PORT" \
	--mode "$MODE" --rate "$RATE" --size "$SIZE" --iters "$ITERS" --mtu "$MTU" --seed "$SEED" --reorder-window "$REORDER" --json $PERF_ARGS \
	>"$DIR/perf.json" 2>"$DIR/perf.err"
perf_status=$?

# Stop everything: the proxies print their summaries, the gateways their final counters.
if command -v curl >/dev/null 2>&1; then
	curl -s "http://$GWA:$METRICS_PORT/metrics" >"$DIR/gateway-a.metrics"
	curl -s "http://$GWB:$METRICS_PORT/metrics" >"$DIR/gateway-b.metrics"
fi
for p in "${pids[@]}"; do kill -INT "$p" 2>/dev/null; done
for p in "${pids[@]}"; do wait "$p" 2>/dev/null; done
pids=()

json() { # json FIELD: the first number of FIELD in the client's JSON (the run's, before per_qp)
	grep -o "\"$1\":[-0-9.e+]*" "$DIR/perf.json" | head -n 1 | cut -d: -f2
}
lost() { # lost NAME DIRECTION CLIENT: the datagrams of CLIENT the loss model of proxy NAME dropped
	grep "\"dir\":\"$2\"" "$DIR/netem-$1.drops" | grep -c "\"client\":\"$3\""
}
gw() { # gw NAME FIELD: a final counter of a gateway ("gateway stopped" line)
	grep "gateway stopped" "$DIR/gateway-$1.err" | grep -o "$2=[0-9]*" | head -n 1 | cut -d= -f2
}
verified=$(grep -o '"verified":[a-z]*' "$DIR/perf.json" | head -n 1 | cut -d: -f2)
retx=$(json retransmitted_packets)
timeouts=$(json timeouts)
acks=$(json ack_packets)
first=$(json first_retransmission_ms)
lost_ab=$(lost ab forward "$GWA:$WAN_PORT") # the client's data
lost_ba=$(lost ba forward "$GWB:$WAN_PORT") # the server's ACKs
data_lost=$((lost_ab + lost_ba))
crem_lost=$(($(lost ab forward "$GWA:$CREM_PORT") + $(lost ab reverse "$GWA:$CREM_PORT") +
	$(lost ba forward "$GWB:$CREM_PORT") + $(lost ba reverse "$GWB:$CREM_PORT")))
why=""
for g in a b; do
	grep -q "gateway stopped" "$DIR/gateway-$g.err" || why="$why gateway $g logged no final counters (see $DIR/gateway-$g.err);"
done
restored=$(($(gw a crf_restored) + $(gw b crf_restored) + 0))
mismatch=$(($(gw a crf_icrc_mismatch) + $(gw b crf_icrc_mismatch) + 0))
repair=$(($(gw a csf_repair_sent) + $(gw b csf_repair_sent) + 0))

echo "verified=${verified:-none}"
echo "roce_lost=$data_lost"
echo "roce_lost_a_to_b=$lost_ab"
echo "roce_lost_b_to_a=$lost_ba"
echo "crem_lost=$crem_lost"
echo "repair_sent=$repair"
echo "restored=$restored"
echo "icrc_mismatch=$mismatch"
echo "rdma_retransmitted=${retx:-none}"
echo "timeouts=${timeouts:-none}"
echo "acks=${acks:-none}"
echo "first_retransmission_ms=${first:-none}"

# The verdict: every byte verified, RDMA retransmissions at most 1.3 x the RoCEv2 datagrams the
# WAN lost plus 2 per timeout, restorations, and no restored packet failing its ICRC check.
[ "$perf_status" -eq 0 ] && [ "$verified" = true ] || why="$why not every byte verified (crem perf exit $perf_status: $(tail -n 1 "$DIR/perf.err"));"
if [ -n "$retx" ] && [ -n "$timeouts" ]; then
	bound=$(awk -v l="$data_lost" -v t="$timeouts" 'BEGIN { printf "%d", 1.3 * l + 2 * t }')
	[ "$retx" -le "$bound" ] || why="$why $retx RDMA retransmissions > 1.3 x $data_lost lost + 2 x $timeouts timeouts = $bound;"
else
	why="$why no figures from crem perf;"
fi
[ "$restored" -gt 0 ] || why="$why no packet restored;"
[ "$mismatch" -eq 0 ] || why="$why $mismatch restored packets failed the ICRC check;"
if [ -z "$why" ]; then
	echo "PASS: every byte verified; $restored restored; $retx RDMA retransmissions <= 1.3 x $data_lost lost + 2 x $timeouts timeouts"
	exit 0
fi
echo "FAIL:$why"
exit 1
