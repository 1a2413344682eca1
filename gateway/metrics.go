package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/pairing"
	"github.com/crem-project/crem/psn"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Stats is a snapshot of every counter: the gateway's own and its engines' (summed over
// flows and shards).
type Stats struct {
	Sender   csf.Stats     // every CSF of the gateway, summed
	Receiver crf.Stats     // every CRF, summed (Receiver.Flows sums the flows)
	Pairing  pairing.Stats // which reverse QP belongs to which flow, summed over the shards
	Flows    int           // outbound flows with a CSF
	Gateway  map[string]uint64
	// Live is what the gateway holds now: sessions, flows, tables and buffers.
	Live Levels
}

// Stats sums the counters of every shard as the shards last published them (at most
// publishEvery old while the gateway runs, exact once Run has returned). It takes no lock of
// the data path.
func (g *Gateway) Stats() Stats {
	st := Stats{Gateway: g.ownCounters()}
	var ns NodeStats
	for _, sh := range g.shards {
		sn := sh.snapshot()
		addCounters(&st.Sender, &sn.sender)
		addCounters(&st.Receiver, &sn.receiver)
		addCounters(&st.Pairing, &sn.pairing)
		addCounters(&ns, &sn.node)
		st.Flows += sn.flows
		l := &st.Live
		l.CSFEstablished += sn.levels.CSFEstablished
		l.CSFSessions += sn.levels.CSFSessions
		l.CRFFlows += sn.levels.CRFFlows
		l.CRFPending += sn.levels.CRFPending
		l.CRFKeptBytes += sn.levels.CRFKeptBytes
		l.CRFHeldBytes += sn.levels.CRFHeldBytes
		l.Senders += sn.levels.Senders
		l.ReceiverRoutes += sn.levels.ReceiverRoutes
		l.Nonces += sn.levels.Nonces
	}
	st.Live.BuffersSmall, st.Live.BuffersLarge = g.small.heldCount(), g.large.heldCount()
	ns.addTo(st.Gateway)
	return st
}

func (g *Gateway) ownCounters() map[string]uint64 {
	c := &g.c
	m := map[string]uint64{
		"write_errors": c.writeErrors.Load(), "read_errors": c.readErrors.Load(),
		"truncated": c.truncated.Load(), "shard_queue_full": c.shardFull.Load(),
		"buffers_allocated": g.small.allocated.Load() + g.large.allocated.Load(),
		"buffers_released":  g.small.released.Load() + g.large.released.Load(),
		"buffers_exhausted": c.buffersExhausted.Load(), "memory_returned": c.memoryReturned.Load(),
		"crem_malformed": c.cremMalformed.Load(), "crem_unknown_flow": c.cremUnknownFlw.Load(),
		"crem_discarded": c.cremDiscarded.Load(), "not_roce": c.notRoCE.Load(),
		"path_reports_malformed": c.pathMalformed.Load(),
	}
	m["unknown_flow_closes_sent"], m["unknown_flow_closes_capped"] = g.unknownClose.counts()
	ps := g.cfg.peerState.Stats()
	m["peer_taken_down"], m["peer_probes"] = ps.Downs, ps.Probes
	g.tun.addCounters(m)
	g.xdp.addCounters(m)
	for k, n := range kindNames {
		m["rx_packets_"+n] = c.rx[k].Load()
		m["tx_packets_"+n] = c.tx[k].Load()
		m["rx_bytes_"+n] = c.rxBytes[k].Load()
		m["tx_bytes_"+n] = c.txBytes[k].Load()
		m["socket_drops_"+n] = c.socketDrops[k].Load()
		m["handed_"+n] = c.handed[k].Load()
		m["dropped_"+n] = c.dropped[k].Load()
	}
	g.offloadCounters(m)
	return m
}

// snake turns a Go field name into a metric name part: RepairSent -> repair_sent,
// ICRCMismatch -> icrc_mismatch, SkippedPSNs -> skipped_psns (an acronym's plural is one word).
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	// plural reports whether rs[j] is the s of an acronym's plural: PSNs.
	plural := func(j int) bool {
		return rs[j] == 's' && j >= 2 && unicode.IsUpper(rs[j-1]) && unicode.IsUpper(rs[j-2]) &&
			(j+1 == len(rs) || unicode.IsUpper(rs[j+1]))
	}
	for i, r := range rs {
		if unicode.IsUpper(r) {
			wordStart := i+1 < len(rs) && unicode.IsLower(rs[i+1]) && !plural(i+1)
			if i > 0 && (unicode.IsLower(rs[i-1]) || wordStart) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// closeReasons name the CLOSE reasons the engines count by (wire.Reason 0 to 5; the engines
// count reasons beyond 5 as 5).
var closeReasons = [...]string{"normal", "idle", "param_unanswered", "resources_exhausted", "circuit_breaker", "protocol_error"}

// A reason family: engine counters that differ only by why, exposed as one metric with a
// reason label. The field that sums such a family (engineSums) is not exposed: sum() over the
// family gives it.
type reasonOf struct{ family, reason, help string }

var engineReasons = map[string]reasonOf{
	"csf.PathReportsUnlisted":       {"path_reports_rejected", "unlisted", pathRejectedHelp},
	"csf.PathReportsWrongFlow":      {"path_reports_rejected", "wrong_flow", pathRejectedHelp},
	"csf.PathReportsUnknownMethod":  {"path_reports_rejected", "unknown_method", pathRejectedHelp},
	"csf.PathReportsImplausible":    {"path_reports_rejected", "implausible", pathRejectedHelp},
	"csf.PathReportsMalformed":      {"path_reports_rejected", "malformed", pathRejectedHelp},
	"csf.UnprotectedNoSession":      {"packets_unprotected", "no_session", unprotectedHelp},
	"csf.UnprotectedNoConfig":       {"packets_unprotected", "no_config", unprotectedHelp},
	"csf.UnprotectedTooLong":        {"packets_unprotected", "too_long", unprotectedHelp},
	"csf.UnprotectedEncodeError":    {"packets_unprotected", "encode_error", unprotectedHelp},
	"csf.UnprotectedBreaker":        {"packets_unprotected", "breaker_open", unprotectedHelp},
	"csf.UnprotectedSessionLost":    {"packets_unprotected", "session_lost", unprotectedHelp},
	"csf.UnprotectedUnheld":         {"packets_unprotected", "unheld_retransmission", unprotectedHelp},
	"pairing.UnpairedContradiction": {"unpaired", "contradiction", unpairedHelp},
	"pairing.UnpairedRestart":       {"unpaired", "restart", unpairedHelp},
	"pairing.UnpairedExpired":       {"unpaired", "expired", unpairedHelp},
	"pairing.UnpairedReplaced":      {"unpaired", "replaced", unpairedHelp},
}

var engineSums = map[string]bool{"csf.PathReportsRejected": true}

// engineNames are names other than the field's in snake case: m alone would read as metres.
var engineNames = map[string]string{"csf.MChanges": "block_repair_changes"}

const (
	unprotectedHelp = "packets of protected flows that crossed with nothing to repair them, by reason (E72): no_session " +
		"(no session with the peer's CRF), no_config (before the first configuration), too_long and encode_error (sources " +
		"that could not be coded), breaker_open (coded while the circuit breaker held m at zero), session_lost (coded " +
		"since the CRF last spoke in a session that turned out lost: silence, or CLOSE for a Flow ID it did not know), " +
		"unheld_retransmission (RDMA retransmissions of a packet the CSF never held or no longer holds)"
	pathRejectedHelp = "PATH_REPORTs refused as a whole, by reason: unlisted (the source is no configured reporter, C14), " +
		"wrong_flow (they name another flow), unknown_method (a method CREM does not define), implausible (Lost Counts " +
		"above what the flow sent)"
	unpairedHelp = "pairings of a reverse QP ended, by reason: contradiction (its PSNs left the flow's range), restart " +
		"(the flow's PSNs started a new space), expired (the flow went quiet), replaced (another reverse QP)"
)

// The gateway's own counters (the keys of Stats.Gateway) and their HELP texts. Those per
// socket and the reason families are below; TestEveryCounterHasHelp fails on a key in none.
var gatewayHelp = map[string]string{
	"write_errors":                   "socket sends that failed",
	"read_errors":                    "socket receives that failed",
	"truncated":                      "received datagrams dropped as too long for a packet buffer",
	"shard_queue_full":               "received datagrams dropped: their shard's queue was full",
	"buffers_allocated":              "packet buffers allocated one by one (the reserve included)",
	"buffers_released":               "packet buffers released by the trim",
	"buffers_exhausted":              "large datagrams dropped as read: the bound of 9 KiB buffers held was reached",
	"memory_returned":                "trims that handed a flood's packet buffers back to the system",
	"not_roce":                       "packets dropped that are not RoCEv2",
	"tun_gso_packets":                "TUN mode with offloads: segmentation super-packets read from the device",
	"tun_gso_segments":               "TUN mode with offloads: packets the super-packets were cut into",
	"tun_checksums_completed":        "TUN mode with offloads: packets whose checksum the kernel left to the gateway, finished",
	"tun_gso_refused":                "TUN mode with offloads: super-packets dropped as malformed or beyond a packet buffer",
	"tun_send_batches":               "TUN mode: batched sends of the raw socket, or writes into the device",
	"tun_coalesced":                  "TUN mode writing into the device with offloads: packets written as part of a super-packet",
	"xdp_to_kernel":                  "xdp data path: packets sent on through the kernel (raw socket): no next hop known on the LAN or WAN interface, or longer than its MTU",
	"xdp_ttl_expired":                "xdp data path: packets dropped whose TTL ran out",
	"xdp_other_frames":               "xdp data path: frames dropped that are not IPv4 (TUN-style mode carries IPv4 only)",
	"xdp_too_long":                   "xdp data path: frames dropped as longer than a packet buffer",
	"xdp_crem_refused":               "xdp data path: CREM datagrams to this host from neither the peer nor a reporter, dropped",
	"xdp_joined":                     "xdp data path: packets received in several frames (multi-buffer AF_XDP, an MTU above 3,826 octets) and joined",
	"xdp_rx_frames_lan":              "xdp data path: frames received on the LAN interface's AF_XDP socket",
	"xdp_tx_frames_lan":              "xdp data path: frames posted on the LAN interface's TX ring",
	"xdp_tx_ring_full_lan":           "xdp data path: frames dropped for a full LAN TX ring",
	"xdp_fill_empty_lan":             "xdp data path: receives that found the LAN socket's fill ring empty",
	"xdp_wakeups_lan":                "xdp data path: system calls that kicked the kernel for the LAN socket",
	"xdp_completions_lan":            "xdp data path: transmissions the kernel completed on the LAN socket",
	"xdp_kernel_rx_dropped_lan":      "xdp data path: frames the kernel dropped for the LAN socket (too long for a frame, say)",
	"xdp_kernel_rx_ring_full_lan":    "xdp data path: frames the kernel dropped for a full LAN RX ring",
	"xdp_kernel_fill_ring_empty_lan": "xdp data path: times the kernel found the LAN fill ring empty",
	"xdp_kernel_invalid_descs_lan":   "xdp data path: invalid RX and TX descriptors of the LAN socket",
	"xdp_rx_frames_wan":              "xdp data path: frames received on the WAN interface's AF_XDP socket",
	"xdp_tx_frames_wan":              "xdp data path: frames posted on the WAN interface's TX ring",
	"xdp_tx_ring_full_wan":           "xdp data path: frames dropped for a full WAN TX ring",
	"xdp_fill_empty_wan":             "xdp data path: receives that found the WAN socket's fill ring empty",
	"xdp_wakeups_wan":                "xdp data path: system calls that kicked the kernel for the WAN socket",
	"xdp_completions_wan":            "xdp data path: transmissions the kernel completed on the WAN socket",
	"xdp_kernel_rx_dropped_wan":      "xdp data path: frames the kernel dropped for the WAN socket (too long for a frame, say)",
	"xdp_kernel_rx_ring_full_wan":    "xdp data path: frames the kernel dropped for a full WAN RX ring",
	"xdp_kernel_fill_ring_empty_wan": "xdp data path: times the kernel found the WAN fill ring empty",
	"xdp_kernel_invalid_descs_wan":   "xdp data path: invalid RX and TX descriptors of the WAN socket",
	"gso_sends":                      "relay with offload: sends of several datagrams in one message (UDP GSO)",
	"gso_datagrams":                  "relay with offload: datagrams those sends held",
	"gso_fallbacks":                  "relay with offload: such sends the kernel refused, sent again one datagram per message",
	"gso_disabled":                   "relay with offload: sockets whose GSO an EIO turned off for good",
	"gro_receives":                   "relay with offload: receives the kernel coalesced (UDP GRO)",
	"gro_datagrams":                  "relay with offload: datagrams those receives held",
	"gro_copied":                     "relay with offload: datagrams copied out of a coalesced receive for want of a fresh buffer",
	"gro_buffers_allocated":          "relay with offload: 64 KiB receive buffers allocated",
	"gro_buffers_released":           "relay with offload: 64 KiB receive buffers released by the trim",
	"packets_protected":              "packets leaving toward the peer while their flow's CSF had a configuration",
	"packets_unprotected":            "packets leaving toward the peer with no CSF, or before it had a configuration",
	"forwarded_from_peer":            "packets from the peer relayed at once (the CRF did not hold them)",
	"delivered_from_crf":             "packets the CRF released or restored, handed to this side",
	"restored_delivered":             "restored packets handed to this side",
	"abandoned":                      "positions the CRF gave up to the RDMA transport",
	"hello_refused_no_src_port":      "HELLOs refused in relay mode: the flow's protect rule names no source port (G2)",
	"flows_started":                  "CSF sessions started, again after a CLOSE included",
	"path_reports_intercepted":       "TUN mode: PATH_REPORTs taken off the path for a CSF (C10)",
	"path_reports_passed":            "TUN mode: PATH_REPORTs to this side's hosts that name no flow with a CSF here, sent on to their host",
	"template_errors":                "TUN mode: deliveries with no header template",
	"reverse_to_sender":              "packets passing back offered to their flow's CSF",
	"reverse_to_none":                "packets passing back offered to no CSF (no flow paired with their QP)",
	"sender_reverse_qp_set":          "reverse QPs set on CSFs, configured or learned",
	"sender_reverse_qp_cleared":      "reverse QPs taken from CSFs when their pairing ended",
	"pairing_events":                 "pairings learned and ended, each logged",
	"reads_asked_again":              "READ requests asked for again, told to the CRF of their responses (G25)",
	"reads_again_unpaired":           "READ requests asked for again that could not be told: the flow not yet paired",
	"routes_expired":                 "CRF Flow IDs taken out of the routing table, their flow released",
	"senders_quiet":                  "CSFs that stopped asking for a session, their flow quiet for the idle timeout",
	"senders_expired":                "CSFs removed, closed and quiet for four idle timeouts",
	"flows_refused_table_full":       "flows left unprotected: the table of CSFs was full",
	"unknown_flow_closes_sent":       "CLOSEs (reason 5) sent in answer to a REPAIR or PARAM_UPDATE for a Flow ID no CRF here holds: the peer's session lost in a restart (G58)",
	"unknown_flow_closes_capped":     "REPAIRs and PARAM_UPDATEs for unknown Flow IDs left unanswered: the answers' budget (256 a second) was spent (G58)",
	"peer_taken_down":                "times the peer's CRF was taken for down: eight HELLOs of a flow unanswered (C3, G59)",
	"peer_probes":                    "rounds of HELLOs sent to a peer taken for down, at most one per hold-off for all flows (C3, G59)",
}

// socketFamilies are the gateway's counters per socket (Stats.Gateway keys KEY_SOCKET), under
// the metric family name with a socket label, and a direction label where one family counts
// both ways.
var socketFamilies = []struct{ key, name, direction, help string }{
	{"rx_packets", "packets", "rx", packetsHelp},
	{"tx_packets", "packets", "tx", packetsHelp},
	{"rx_bytes", "bytes", "rx", "octets received (direction rx) and sent (tx), by socket"},
	{"tx_bytes", "bytes", "tx", "octets received (direction rx) and sent (tx), by socket"},
	{"socket_drops", "socket_drops", "", "datagrams the kernel dropped for a full receive buffer, by socket"},
	{"handed", "handed", "", "received datagrams handed to a shard, by socket"},
	{"dropped", "dropped", "", "received datagrams dropped by the gateway, by socket (received = handed + dropped)"},
}

const packetsHelp = "datagrams received (direction rx) and sent (tx), by socket: crem (CREM messages), " +
	"local (this side's endpoints), wan (the peer's relayed datagrams), tun (the TUN device)"

var gatewayReasons = map[string]reasonOf{
	"crem_discarded":            {"crem_dropped", "bad_header", cremDroppedHelp},
	"crem_malformed":            {"crem_dropped", "malformed", cremDroppedHelp},
	"crem_unknown_flow":         {"crem_dropped", "unknown_flow", cremDroppedHelp},
	"path_reports_malformed":    {"path_reports_dropped", "malformed", pathDroppedHelp},
	"path_reports_unknown_flow": {"path_reports_dropped", "unknown_flow", pathDroppedHelp},
}

const (
	cremDroppedHelp = "datagrams on the CREM port dropped, by reason: bad_header (too short, another version or an unknown type), " +
		"malformed (a message that does not parse), unknown_flow (for no engine of this gateway)"
	pathDroppedHelp = "PATH_REPORTs the gateway dropped itself, by reason: malformed (does not parse), unknown_flow (names no flow it protects)"
)

// engineMetric is one exposed counter of an engine's Stats: the field at index (an element of
// it for arrays), under desc with labels.
type engineMetric struct {
	desc   *prometheus.Desc
	engine int // engineCSF, engineCRF, enginePairing
	index  []int
	elem   int // the array element; -1 for a counter field
	labels []string
}

const (
	engineCSF = iota
	engineCRF
	enginePairing
)

type gwMetric struct {
	desc  *prometheus.Desc
	label []string
}

// flowCounter is a per-flow counter of the busiest flows.
type flowCounter[R any] struct {
	desc *prometheus.Desc
	v    func(*R) uint64
}

// collector exposes the gateway's counters and gauges to Prometheus. The engines' counters
// are found by reflection over their Stats types, so a counter an engine adds appears without
// a change here (TestEveryCounterHasHelp asks for its HELP text). Every metric is described
// once, when the collector is made (the registry checks what a scrape collects against it),
// and a scrape reads what the shards published: it takes no lock of the data path.
type collector struct {
	g       *Gateway
	engines []engineMetric
	gw      map[string]gwMetric
	descs   []*prometheus.Desc

	flows, live, sessions, pending, crfBytes, tables, bufs, bufBytes *prometheus.Desc
	build                                                            prometheus.Metric

	csfFlow                                                              []flowCounter[csfRow]
	crfFlow                                                              []flowCounter[crfRow]
	csfState, csfRate, csfK, csfM, csfLoss, csfSRTT, csfBreaker, crfRate *prometheus.Desc
	// recovery is crem_crf_block_recovery_seconds, one histogram per class (PR18).
	recovery *prometheus.Desc
}

// recoveryClasses are the CRF's block recovery histograms by their class label (PR18).
var recoveryClasses = []struct {
	field, class string
	of           func(*crf.Stats) *crf.Recovery
}{
	{"RecoveryWithinM", "within_m", func(s *crf.Stats) *crf.Recovery { return &s.RecoveryWithinM }},
	{"RecoveryBeyondM", "beyond_m", func(s *crf.Stats) *crf.Recovery { return &s.RecoveryBeyondM }},
}

// recoveryField reports whether key names one of the CRF's recovery histograms, which are
// exported as a histogram, not as counters.
func recoveryField(key string) bool {
	for _, c := range recoveryClasses {
		if key == "crf."+c.field {
			return true
		}
	}
	return false
}

// recoveryHistogram is h as a Prometheus histogram: cumulative counts at every bound, in seconds.
func recoveryHistogram(d *prometheus.Desc, h *crf.Recovery, class string) prometheus.Metric {
	buckets := make(map[float64]uint64, crf.RecoveryBuckets)
	var n uint64
	for i := range crf.RecoveryBuckets {
		n += h.Buckets[i]
		buckets[crf.RecoveryBound(i).Seconds()] = n
	}
	return prometheus.MustNewConstHistogram(d, h.Count(), float64(h.SumMicros)/1e6, buckets, class)
}

// Collector returns a Prometheus collector of every counter and gauge of the gateway.
func (g *Gateway) Collector() prometheus.Collector { return newCollector(g) }

func newCollector(g *Gateway) *collector {
	c := &collector{g: g, gw: map[string]gwMetric{}}
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		d := prometheus.NewDesc(name, help, labels, nil)
		c.descs = append(c.descs, d)
		return d
	}
	families := map[string]*prometheus.Desc{}
	family := func(name, help string, labels ...string) *prometheus.Desc {
		if d, ok := families[name]; ok {
			return d
		}
		d := desc(name, help, labels...)
		families[name] = d
		return d
	}
	var walk func(engine int, prefix, key string, t reflect.Type, index []int)
	walk = func(engine int, prefix, key string, t reflect.Type, index []int) {
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || engineSums[key+f.Name] || recoveryField(key+f.Name) {
				continue
			}
			idx := append(slices.Clone(index), i)
			name := prefix + snake(f.Name)
			if n, ok := engineNames[key+f.Name]; ok {
				name = prefix + n
			}
			switch f.Type.Kind() {
			case reflect.Uint64:
				if r, ok := engineReasons[key+f.Name]; ok {
					d := family(prefix+r.family+"_total", r.help, "reason")
					c.engines = append(c.engines, engineMetric{d, engine, idx, -1, []string{r.reason}})
					continue
				}
				d := desc(name+"_total", helpText(engineHelp, key+f.Name))
				c.engines = append(c.engines, engineMetric{d, engine, idx, -1, nil})
			case reflect.Struct:
				walk(engine, name+"_", key+"flow.", f.Type, idx)
			case reflect.Array:
				d := desc(name+"_total", helpText(engineHelp, key+f.Name), "reason")
				for j := range f.Type.Len() {
					c.engines = append(c.engines, engineMetric{d, engine, idx, j, []string{closeReasons[min(j, len(closeReasons)-1)]}})
				}
			}
		}
	}
	walk(engineCSF, "crem_csf_", "csf.", reflect.TypeFor[csf.Stats](), nil)
	walk(engineCRF, "crem_crf_", "crf.", reflect.TypeFor[crf.Stats](), nil)
	walk(enginePairing, "crem_pairing_", "pairing.", reflect.TypeFor[pairing.Stats](), nil)

	for k, h := range gatewayHelp {
		c.gw[k] = gwMetric{desc: desc("crem_gateway_"+k+"_total", h)}
	}
	for _, f := range socketFamilies {
		if f.direction == "" {
			d := family("crem_gateway_"+f.name+"_total", f.help, "socket")
			for _, s := range kindNames {
				c.gw[f.key+"_"+s] = gwMetric{d, []string{s}}
			}
			continue
		}
		d := family("crem_gateway_"+f.name+"_total", f.help, "socket", "direction")
		for _, s := range kindNames {
			c.gw[f.key+"_"+s] = gwMetric{d, []string{s, f.direction}}
		}
	}
	for k, r := range gatewayReasons {
		c.gw[k] = gwMetric{family("crem_gateway_"+r.family+"_total", r.help, "reason"), []string{r.reason}}
	}

	c.recovery = desc("crem_crf_block_recovery_seconds", "time from the first gap the CRF saw in a block to the solve that "+
		"restored it, by class: within_m (the solve restored at most the block's m sources), beyond_m (more: the block "+
		"needed repair beyond its ordinary symbols)", "class")
	c.flows = desc("crem_gateway_flows", "outbound flows with a CSF")
	c.live = desc("crem_gateway_live_flows", "flows protected now, by half: csf (CSF sessions established), crf (flows the CRFs serve)", "half")
	c.sessions = desc("crem_gateway_csf_sessions", "CSFs asking for a session (HELLO) or holding one")
	c.pending = desc("crem_gateway_crf_pending_sessions", "CRF sessions pending since their HELLO, not yet proven")
	c.crfBytes = desc("crem_gateway_crf_bytes", "octets the CRFs keep: repair symbols (kept), packets held for in-order delivery (held)", "what")
	c.tables = desc("crem_gateway_table_entries", "entries of the gateway's bounded tables: CSFs (csf), CRF Flow IDs routed (crf_routes), HELLO nonces (nonces)", "table")
	c.bufs = desc("crem_gateway_buffers_held", "packet buffers held, free or in use, by size: small (512 octets), large (9 KiB), gro (64 KiB)", "size")
	c.bufBytes = desc("crem_gateway_buffer_bytes", "octets of packet buffers held")
	bd := desc("crem_build_info", "the build of this gateway (always 1): its version, Go version and the FEC codec's path on this processor",
		"version", "goversion", "codec_path")
	ver, gover := buildVersion(g.version)
	c.build = prometheus.MustNewConstMetric(bd, prometheus.GaugeValue, 1, ver, gover, fec.CodecPath())

	fl := []string{"src", "dst", "qp"}
	top := fmt.Sprintf("one of the %d busiest flows", maxLabelledFlows)
	busiest := ", for " + top
	for _, m := range []struct {
		name, help string
		v          func(*csfRow) uint64
	}{
		{"sources", "csf.Sources", func(r *csfRow) uint64 { return r.st.Sources }},
		{"sources_unprotected", "csf.SourcesUnprotected", func(r *csfRow) uint64 { return r.st.SourcesUnprotected }},
		{"repair_sent", "csf.RepairSent", func(r *csfRow) uint64 { return r.st.RepairSent }},
		{"retx_sent", "csf.RetxSent", func(r *csfRow) uint64 { return r.st.RetxSent }},
		{"source_copy_sent", "csf.SourceCopySent", func(r *csfRow) uint64 { return r.st.SourceCopySent }},
		{"requests_received", "csf.RequestsReceived", func(r *csfRow) uint64 { return r.st.RequestsReceived }},
		{"unprotected", "csf.Unprotected", func(r *csfRow) uint64 { return r.st.Unprotected }},
		{"repair_denied_budget", "csf.RepairDeniedBudget", func(r *csfRow) uint64 { return r.st.RepairDeniedBudget }},
	} {
		c.csfFlow = append(c.csfFlow, flowCounter[csfRow]{desc("crem_csf_flow_"+m.name+"_total", engineHelp[m.help]+busiest, fl...), m.v})
	}
	c.csfState = desc("crem_csf_flow_state", "the session state of "+top+": 0 idle, 1 hello, 2 unprotected, 3 established, 4 closed", fl...)
	c.csfRate = desc("crem_csf_flow_source_rate", "source packets per second of "+top+", smoothed over 10 s (ranks the busiest)", fl...)
	c.csfK = desc("crem_csf_flow_block_sources", "k, the sources per block of the configuration in force, of "+top+" (0: no configuration yet)", fl...)
	c.csfM = desc("crem_csf_flow_block_repair", "m, the repair symbols per block in force for new blocks, of "+top+" (0 while the breaker is open or before a configuration)", fl...)
	c.csfLoss = desc("crem_csf_flow_loss_ratio", "the CSF's estimate of the path's loss probability for "+top+" (0 to 1)", fl...)
	c.csfSRTT = desc("crem_csf_flow_srtt_seconds", "the smoothed round-trip time to the CRF of "+top+"", fl...)
	c.csfBreaker = desc("crem_csf_flow_breaker_state", "the circuit breaker of "+top+" (C11 f): 0 closed (repair allowed), 1 open (m held at 0), 2 closing the flow (open over a minute)", fl...)
	for _, m := range []struct {
		name, help string
		v          func(*crfRow) uint64
	}{
		{"sources", "crf.flow.Sources", func(r *crfRow) uint64 { return r.st.Sources }},
		{"restored", "crf.flow.Restored", func(r *crfRow) uint64 { return r.st.Restored }},
		{"icrc_mismatch", "crf.flow.ICRCMismatch", func(r *crfRow) uint64 { return r.st.ICRCMismatch }},
		{"abandoned", "crf.flow.Abandoned", func(r *crfRow) uint64 { return r.st.Abandoned }},
		{"blocks_evicted", "crf.flow.BlocksEvicted", func(r *crfRow) uint64 { return r.st.BlocksEvicted }},
		{"requests", "crf.flow.Requests", func(r *crfRow) uint64 { return r.st.Requests }},
	} {
		c.crfFlow = append(c.crfFlow, flowCounter[crfRow]{desc("crem_crf_flow_"+m.name+"_total", engineHelp[m.help]+busiest, "flow_id"), m.v})
	}
	c.crfRate = desc("crem_crf_flow_source_rate", "source packets per second of "+top+", smoothed over 10 s (ranks the busiest)", "flow_id")
	return c
}

// helpText is the HELP text of key, or words made of it where the table lacks it (which
// TestEveryCounterHasHelp reports).
func helpText(table map[string]string, key string) string {
	if h, ok := table[key]; ok {
		return h
	}
	_, field, _ := strings.Cut(key, ".")
	return "counter of " + strings.ReplaceAll(snake(strings.TrimPrefix(field, "flow.")), "_", " ")
}

// buildVersion returns the version (v if set, else the main module's, else "dev") and the Go
// version of the running binary.
func buildVersion(v string) (version, goversion string) {
	version, goversion = v, runtime.Version()
	if bi, ok := debug.ReadBuildInfo(); ok {
		if version == "" && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			version = bi.Main.Version
		}
		if bi.GoVersion != "" {
			goversion = bi.GoVersion
		}
	}
	if version == "" {
		version = "dev"
	}
	return version, goversion
}

func (c *collector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range c.descs {
		ch <- d
	}
}

func (c *collector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Stats()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	engines := [...]reflect.Value{reflect.ValueOf(st.Sender), reflect.ValueOf(st.Receiver), reflect.ValueOf(st.Pairing)}
	for _, m := range c.engines {
		v := engines[m.engine].FieldByIndex(m.index)
		if m.elem >= 0 {
			v = v.Index(m.elem)
		}
		counter(m.desc, v.Uint(), m.labels...)
	}
	for k, v := range st.Gateway {
		if m, ok := c.gw[k]; ok {
			counter(m.desc, v, m.label...)
		}
	}
	for _, rc := range recoveryClasses {
		ch <- recoveryHistogram(c.recovery, rc.of(&st.Receiver), rc.class)
	}
	ch <- c.build
	gauge(c.flows, float64(st.Flows))
	l := st.Live
	gauge(c.live, float64(l.CSFEstablished), "csf")
	gauge(c.live, float64(l.CRFFlows), "crf")
	gauge(c.sessions, float64(l.CSFSessions))
	gauge(c.pending, float64(l.CRFPending))
	gauge(c.crfBytes, float64(l.CRFKeptBytes), "kept")
	gauge(c.crfBytes, float64(l.CRFHeldBytes), "held")
	gauge(c.tables, float64(l.Senders), "csf")
	gauge(c.tables, float64(l.ReceiverRoutes), "crf_routes")
	gauge(c.tables, float64(l.Nonces), "nonces")
	gro := int(c.g.gro.heldNow.Load()) // coalesced receive buffers (relay.offload)
	gauge(c.bufs, float64(l.BuffersSmall), "small")
	gauge(c.bufs, float64(l.BuffersLarge), "large")
	gauge(c.bufs, float64(gro), "gro")
	gauge(c.bufBytes, float64(l.BuffersSmall*smallSize+l.BuffersLarge*bufSize+gro*groBufSize))
	c.perFlow(counter, gauge)
}

// perFlow emits the series of the busiest flows of each half (maxLabelledFlows of each, by
// smoothed source rate) as the shards last published them.
func (c *collector) perFlow(counter func(*prometheus.Desc, uint64, ...string), gauge func(*prometheus.Desc, float64, ...string)) {
	var outs []csfRow
	var ins []crfRow
	for _, sh := range c.g.shards {
		sn := sh.snapshot()
		outs = append(outs, sn.csfRows...)
		ins = append(ins, sn.crfRows...)
	}
	slices.SortStableFunc(outs, func(a, b csfRow) int { return busier(a.rate, b.rate, a.st.Sources, b.st.Sources) })
	slices.SortStableFunc(ins, func(a, b crfRow) int { return busier(a.rate, b.rate, a.st.Sources, b.st.Sources) })
	outs, ins = outs[:min(len(outs), maxLabelledFlows)], ins[:min(len(ins), maxLabelledFlows)]
	for i := range outs {
		r := &outs[i]
		src, dst, qp := r.key.Src.String(), r.key.Dst.String(), fmt.Sprint(r.key.DestQP)
		for _, m := range c.csfFlow {
			counter(m.desc, m.v(r), src, dst, qp)
		}
		gauge(c.csfState, float64(r.state), src, dst, qp)
		gauge(c.csfRate, r.rate, src, dst, qp)
		gauge(c.csfK, float64(r.k), src, dst, qp)
		gauge(c.csfM, float64(r.m), src, dst, qp)
		gauge(c.csfLoss, r.loss, src, dst, qp)
		gauge(c.csfSRTT, r.srtt.Seconds(), src, dst, qp)
		gauge(c.csfBreaker, float64(r.breaker), src, dst, qp)
	}
	seen := map[uint32]bool{} // two shards' CRFs may have drawn one Flow ID: one series
	for i := range ins {
		r := &ins[i]
		if seen[r.id] {
			continue
		}
		seen[r.id] = true
		id := fmt.Sprintf("%#08x", r.id)
		for _, m := range c.crfFlow {
			counter(m.desc, m.v(r), id)
		}
		gauge(c.crfRate, r.rate, id)
	}
}

// ServeMetrics serves /metrics and /healthz on addr until ctx ends. /metrics has the
// gateway's collector and the Go runtime's and the process's (go_*, process_*).
func (g *Gateway) ServeMetrics(ctx context.Context, ln net.Listener) error {
	reg, err := g.registry()
	if err != nil {
		return err
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-g.done:
			http.Error(w, "stopping", http.StatusServiceUnavailable)
		default:
			fmt.Fprintln(w, "ok")
		}
	})
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		<-ctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		srv.Shutdown(sctx)
	}()
	if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return fmt.Errorf("gateway: metrics: %w", err)
	}
	return nil
}

// registry holds what /metrics serves: the gateway's collector, the Go runtime's and the
// process's.
func (g *Gateway) registry() (*prometheus.Registry, error) {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{g.Collector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("gateway: metrics: %w", err)
		}
	}
	return reg, nil
}

// MetricsAddress returns the configured metrics address ("" for none).
func (g *Gateway) MetricsAddress() string { return g.cfg.metricsAddr }

// SenderFlow is what the gateway knows of one outbound flow.
type SenderFlow struct {
	Stats csf.Stats
	State csf.State
	// ReverseQP is the QP whose ACKs and READ responses are offered to the flow's CSF, when
	// ReverseKnown: configured, or learned (RDMA CM, or PSN correlation confirmed).
	ReverseQP    uint32
	ReverseKnown bool
	// AckedThrough is the highest PSN an acknowledgement accepted by the CSF acknowledged,
	// when AckedKnown (csf.Sender.AckedThrough).
	AckedThrough psn.PSN
	AckedKnown   bool
	// KM is the codes the flow's CSF used over time (csf.Sender.KMTimeline, P11).
	KM []csf.KMPoint
}

// SenderFlow returns what the gateway knows of an outbound flow, if it has a CSF.
func (g *Gateway) SenderFlow(k flow.Key) (SenderFlow, bool) {
	sh := g.shards[g.pairHash(k.Src, k.Dst)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	s := sh.n.Sender(k)
	if s == nil {
		return SenderFlow{}, false
	}
	f := SenderFlow{Stats: s.Stats(), State: s.State()}
	f.ReverseQP, f.ReverseKnown = sh.n.ReverseQP(k)
	f.AckedThrough, f.AckedKnown = s.AckedThrough()
	f.KM = s.KMTimeline()
	return f, true
}

// ReceiverFlow returns the CRF's counters of an inbound flow, if it has one.
func (g *Gateway) ReceiverFlow(k flow.Key) (crf.FlowStats, bool) {
	sh := g.shards[g.pairHash(k.Src, k.Dst)]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	id, ok := sh.n.recv.Lookup(k)
	if !ok {
		return crf.FlowStats{}, false
	}
	return sh.n.recv.FlowStats(id)
}
