//go:build linux

package gateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"reflect"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/pairing"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	dto "github.com/prometheus/client_model/go"
)

// gather collects the gateway's collector into metric families by name.
func gather(t *testing.T, g *Gateway) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(g.Collector())
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// TestScrapeTakesNoShardLock: Stats and a scrape of the collector complete while every
// shard's lock is held (the data path busy), during traffic: they read what the shards
// published. Before, both took each shard's lock and summed every flow's counters under it, so
// a scrape stalled forwarding in proportion to the flows (and here, waited forever).
func TestScrapeTakesNoShardLock(t *testing.T) {
	g := newTestGateway(t, Options{Seed: 1}, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := runAsync(ctx, g)
	defer func() { cancel(); waitRun(t, done, 5*time.Second, "stop") }()
	ep, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer ep.Close()
	syn := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: g.cfg.localEP, Dst: g.cfg.remoteEP, DestQP: 7}}
	for i := range 200 {
		syn.Desc.DestQP = uint32(0x100 + i%100)
		ep.WriteToUDPAddrPort(syn.Next(256), g.RelayAddr())
	}
	waitFor(t, 5*time.Second, "the flows published", func() bool { return g.Stats().Flows == 100 })
	for _, sh := range g.shards {
		sh.mu.Lock()
	}
	res := make(chan int, 1)
	go func() {
		n := 0
		for range 50 {
			n += g.Stats().Flows
			n += len(gather(t, g))
		}
		res <- n
	}()
	select {
	case <-res:
	case <-time.After(5 * time.Second):
		t.Error("Stats and the scrape waited for the shards' locks")
	}
	for _, sh := range g.shards {
		sh.mu.Unlock()
	}
}

// busyGateway returns a gateway with 100 flows in each half, driven by hand in virtual time
// (it does not run): every fifth flow of each half carries traffic for two seconds.
func busyGateway(t *testing.T) *Gateway {
	t.Helper()
	c := relayConfig()
	c.Protect = []ProtectRule{{SrcPort: 5000}}
	g, err := New(c, Options{Seed: 1, Sockets: Sockets{CREM: cremSocket(t)}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { g.Close() })
	// Driven by hand, in virtual time: the gateway does not run.
	sh := g.shards[g.pairHash(g.cfg.localEP, g.cfg.remoteEP)]
	n := sh.n
	outs, ins := make([]cremtest.Synth, 100), make([]cremtest.Synth, 100)
	peer := netip.MustParseAddrPort("127.0.0.1:9")
	now := time.Millisecond
	for i := range 100 {
		qp := uint32(0x100 + i)
		outs[i] = cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: g.cfg.localEP, Dst: g.cfg.remoteEP, SrcPort: 5000, DestQP: qp}, PSN: psn.PSN(i)}
		ins[i] = cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: g.cfg.remoteEP, Dst: g.cfg.localEP, SrcPort: 5000, DestQP: qp}, PSN: psn.PSN(i)}
		n.Local(now, 5000, outs[i].Next(128))
		h := wire.Hello{Capabilities: n.limits.Capabilities(4096), SenderNonce: uint64(i + 1),
			Source: g.cfg.remoteEP, Destination: g.cfg.localEP, FlowLabel: qp}
		b, _ := h.Append(nil)
		n.CREM(now, peer, b, false)
	}
	// Each CRF flow gets its configuration: from then on it counts its sources.
	var ids []uint32
	n.Drain(func(d Datagram) {
		if d.Kind == ToCREM && len(d.Payload) > 0 && wire.Type(d.Payload[0]&0x0f) == wire.TypeHelloAck {
			if h, err := wire.ParseHelloAck(d.Payload); err == nil {
				ids = append(ids, h.FlowID)
			}
		}
	})
	for i, id := range ids {
		pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1024, EffectivePSN: psn.PSN(i + 1)}
		b, _ := pu.Append(nil)
		n.CREM(now, peer, b, false)
	}
	n.Drain(func(Datagram) {})
	busy := func(i int) bool { return i%5 == 0 } // 20 flows of the 100, spread among them
	for range 20 {
		now += publishEvery
		for i := range 100 {
			if !busy(i) {
				continue
			}
			for range 10 {
				n.Local(now, 5000, outs[i].Next(128))
				n.WAN(now, ins[i].Next(128), false)
			}
		}
		n.Tick(now)
		n.Drain(func(Datagram) {})
		sh.publish(now)
	}
	return g
}

// TestBusiestFlowsLabelled: with 100 flows in each half, the per-flow series are those
// of the 64 busiest (smoothed source rate), which include the 20 flows that carry traffic now;
// the live-flow gauges count all. Before, past 64 flows no flow had series at all (and the first
// 64 would have been the oldest, not the busiest).
func TestBusiestFlowsLabelled(t *testing.T) {
	g := busyGateway(t)
	st := g.Stats()
	if st.Live.CRFFlows != 100 || st.Live.Senders != 100 || st.Flows != 100 {
		t.Fatalf("live: %+v, flows %d: want 100 in each half", st.Live, st.Flows)
	}
	fams := gather(t, g)
	for _, name := range []string{"crem_csf_flow_sources_total", "crem_crf_flow_sources_total"} {
		f := fams[name]
		if f == nil || len(f.Metric) != maxLabelledFlows {
			t.Fatalf("%s: %d series, want %d", name, len(f.GetMetric()), maxLabelledFlows)
		}
		busyFound := 0
		for _, m := range f.Metric {
			if m.GetCounter().GetValue() > 100 {
				busyFound++
			}
		}
		if busyFound != 20 {
			t.Fatalf("%s: %d of the 20 busy flows among the series", name, busyFound)
		}
	}
	live := fams["crem_gateway_live_flows"]
	if live == nil || len(live.Metric) != 2 {
		t.Fatal("no crem_gateway_live_flows")
	}
}

// TestRuntimeMetrics: /metrics has the Go runtime's and the process's metrics beside the
// gateway's, and the gauges of what it holds (live flows, table entries, buffers).
func TestRuntimeMetrics(t *testing.T) {
	g := newTestGateway(t, Options{Seed: 1}, nil)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go g.ServeMetrics(ctx, ln)
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, m := range []string{"go_goroutines ", "go_memstats_heap_inuse_bytes ", "go_gc_duration_seconds", "process_resident_memory_bytes ",
		`crem_gateway_live_flows{half="csf"}`, `crem_gateway_live_flows{half="crf"}`, `crem_gateway_table_entries{table="crf_routes"}`,
		`crem_gateway_buffers_held{size="large"}`, "crem_gateway_buffer_bytes ", "crem_gateway_buffers_exhausted_total",
		"crem_gateway_routes_expired_total", "crem_gateway_flows "} {
		if !strings.Contains(string(body), m) {
			t.Errorf("/metrics lacks %s", m)
		}
	}
}

// BenchmarkStatsManyFlows: what a shard's publication of its counters costs with 1,000 flows
// in each half (the shard pays it every publishEvery while traffic flows, whatever the scrape
// rate), and what Stats and a scrape of the collector cost (neither takes the shard's lock).
func BenchmarkStatsManyFlows(b *testing.B) {
	c := relayConfig()
	c.Protect = []ProtectRule{{SrcPort: 5000}}
	cs, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	g, err := New(c, Options{Seed: 1, Sockets: Sockets{CREM: cs}})
	if err != nil {
		b.Fatal(err)
	}
	defer g.Close()
	sh := g.shards[g.pairHash(g.cfg.localEP, g.cfg.remoteEP)]
	n := sh.n
	peer := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 1, byte(i >> 8), byte(i)}), 9)
	}
	now := time.Millisecond
	for i := range 1000 {
		qp := uint32(0x100 + i)
		out := cremtest.Synth{Desc: flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: g.cfg.localEP, Dst: g.cfg.remoteEP, SrcPort: 5000, DestQP: qp}}
		n.Local(now, 5000, out.Next(128))
		h := wire.Hello{Capabilities: n.limits.Capabilities(4096), SenderNonce: uint64(i + 1), Source: g.cfg.remoteEP, Destination: g.cfg.localEP, FlowLabel: qp}
		m, _ := h.Append(nil)
		n.CREM(now, peer(i), m, false)
	}
	var ids []uint32
	n.Drain(func(d Datagram) {
		if d.Kind == ToCREM && wire.Type(d.Payload[0]&0x0f) == wire.TypeHelloAck {
			if h, err := wire.ParseHelloAck(d.Payload); err == nil {
				ids = append(ids, h.FlowID)
			}
		}
	})
	for i, id := range ids {
		pu := wire.ParamUpdate{FlowID: id, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1024, EffectivePSN: psn.PSN(i + 1)}
		m, _ := pu.Append(nil)
		n.CREM(now, peer(i), m, false)
	}
	n.Drain(func(Datagram) {})
	sh.publish(now)
	if st := g.Stats(); st.Live.Senders != 1000 || st.Live.CRFFlows != 1000 {
		b.Fatalf("%+v", st.Live)
	}
	b.Run("publish", func(b *testing.B) {
		for b.Loop() {
			now += publishEvery
			sh.publish(now)
		}
	})
	b.Run("Stats", func(b *testing.B) {
		for b.Loop() {
			g.Stats()
		}
	})
	b.Run("collect", func(b *testing.B) {
		reg := prometheus.NewRegistry()
		reg.MustRegister(g.Collector())
		for b.Loop() {
			if _, err := reg.Gather(); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// families gathers the registry /metrics serves into metric families by name.
func families(t *testing.T, g *Gateway) map[string]*dto.MetricFamily {
	t.Helper()
	reg, err := g.registry()
	if err != nil {
		t.Fatal(err)
	}
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*dto.MetricFamily{}
	for _, f := range fams {
		out[f.GetName()] = f
	}
	return out
}

// lint gathers reg and runs promlint on it, as testutil.GatherAndLint does.
func lint(reg prometheus.Gatherer) ([]promlint.Problem, error) {
	fams, err := reg.Gather()
	if err != nil {
		return nil, err
	}
	return promlint.NewWithMetricFamilies(fams).Lint()
}

// TestMetricsLint: what /metrics serves passes Prometheus's own linter (promlint: counters end
// in _total and only they, base units, no camel case, a HELP for every metric), with the
// per-flow series of both halves present; and the linter, wired as here, reports a metric
// that breaks the conventions.
func TestMetricsLint(t *testing.T) {
	g := busyGateway(t)
	reg, err := g.registry()
	if err != nil {
		t.Fatal(err)
	}
	problems, err := lint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
	bad := prometheus.NewRegistry()
	bad.MustRegister(prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "crem_gateway_rx_packets_crem", Help: "x"}, func() float64 { return 1 }))
	if problems, err := lint(bad); err != nil || len(problems) == 0 {
		t.Errorf("a counter without _total: problems %v, err %v", problems, err)
	}
}

var (
	goField  = regexp.MustCompile(`\b[A-Za-z]+\.[A-Z][A-Za-z0-9]*\b`) // Stats.CloseReceived, csf.Stats
	goCamel  = regexp.MustCompile(`\b(?:[A-Z][a-z0-9]+){2,}\b`)       // FlowStats, CloseReceived
	snakeTok = regexp.MustCompile(`\b[a-z0-9]+(?:_[a-z0-9]+)+\b`)     // rx_packets_crem
)

// helpProblem says what is wrong with a HELP text ("" if nothing): it must say what is counted,
// in words, not name a Go identifier or the metric's own name parts; snake_case words are
// allowed where they are values of the metric's labels, which the text explains.
func helpProblem(help string, labelValues map[string]bool) string {
	switch {
	case len(strings.Fields(help)) < 2:
		return "fewer than two words"
	case goField.MatchString(help):
		return "names a Go field: " + goField.FindString(help)
	case goCamel.MatchString(help):
		return "names a Go identifier: " + goCamel.FindString(help)
	case strings.HasPrefix(help, "counter of") || strings.HasPrefix(help, "gateway counter"):
		return "made of the metric's name, not written"
	}
	for _, w := range snakeTok.FindAllString(help, -1) {
		if !labelValues[w] {
			return "names an identifier: " + w
		}
	}
	return ""
}

// TestMetricHelpInWords: every crem_ metric's HELP says what it counts in words: no Go field
// (Stats.CloseReceived, FlowStats.Abandoned) or identifier, no words made of the metric's name.
func TestMetricHelpInWords(t *testing.T) {
	for help, bad := range map[string]bool{
		"Stats.CloseReceived": true, "FlowStats.Abandoned": true, "per flow: csf.Stats": true,
		"gateway counter rx_packets_crem": true, "PATH_REPORTs refused by reason: wrong_flow (they name another flow)": false,
		"restored packets that failed their ICRC check: never delivered (C12)": false,
	} {
		if p := helpProblem(help, map[string]bool{"wrong_flow": true}); (p != "") != bad {
			t.Errorf("%q: problem %q, want one: %v", help, p, bad)
		}
	}
	n := 0
	for name, f := range families(t, busyGateway(t)) {
		if !strings.HasPrefix(name, "crem_") {
			continue
		}
		n++
		values := map[string]bool{}
		for _, m := range f.Metric {
			for _, l := range m.Label {
				values[l.GetValue()] = true
			}
		}
		if p := helpProblem(f.GetHelp(), values); p != "" {
			t.Errorf("%s: HELP %q: %s", name, f.GetHelp(), p)
		}
	}
	if n < 250 {
		t.Errorf("%d crem_ metrics checked, want 250 and more", n)
	}
}

// TestEveryCounterHasHelp: every counter of the engines' Stats and every key of Stats.Gateway
// has its HELP text (or belongs to a reason family), and the tables name no counter that is
// gone.
func TestEveryCounterHasHelp(t *testing.T) {
	used := map[string]bool{}
	var walk func(key string, tp reflect.Type)
	walk = func(key string, tp reflect.Type) {
		for i := range tp.NumField() {
			f := tp.Field(i)
			k := key + f.Name
			switch {
			case recoveryField(k):
			case f.Type.Kind() == reflect.Struct:
				walk(key+"flow.", f.Type)
			case engineSums[k]:
			case engineReasons[k].family != "":
			case engineHelp[k] != "":
				used[k] = true
			default:
				t.Errorf("%s: no HELP text in engineHelp", k)
			}
		}
	}
	walk("csf.", reflect.TypeFor[csf.Stats]())
	walk("crf.", reflect.TypeFor[crf.Stats]())
	walk("pairing.", reflect.TypeFor[pairing.Stats]())
	for k := range engineHelp {
		if !used[k] {
			t.Errorf("engineHelp has %s, no engine counter", k)
		}
	}
	g := newTestGateway(t, Options{Seed: 1}, nil)
	c := newCollector(g)
	keys := g.Stats().Gateway
	for k := range keys {
		if _, ok := c.gw[k]; !ok {
			t.Errorf("Stats.Gateway[%q]: not exported (no HELP text in gatewayHelp, socketFamilies or gatewayReasons)", k)
		}
	}
	if len(keys) < 60 {
		t.Errorf("Stats.Gateway has %d keys, want 60 and more", len(keys))
	}
}

// TestLabelsNotNames: the socket, the direction and reasons are labels of one metric, not parts
// of names: crem_gateway_packets_total{direction="rx",socket="crem"}, one series per socket (and
// direction); the CREM port's and
// the PATH_REPORTs' drops, PATH_REPORTs refused, pairings ended and CLOSEs by a reason label
// whose values are words.
func TestLabelsNotNames(t *testing.T) {
	fams := families(t, newTestGateway(t, Options{Seed: 1}, nil))
	want := map[string][]string{
		"crem_gateway_socket_drops_total":         {"socket", "crem", "local", "tun", "wan"},
		"crem_gateway_handed_total":               {"socket", "crem", "local", "tun", "wan"},
		"crem_gateway_dropped_total":              {"socket", "crem", "local", "tun", "wan"},
		"crem_gateway_crem_dropped_total":         {"reason", "bad_header", "malformed", "unknown_flow"},
		"crem_gateway_path_reports_dropped_total": {"reason", "malformed", "unknown_flow"},
		"crem_csf_path_reports_rejected_total":    {"reason", "implausible", "malformed", "unknown_method", "unlisted", "wrong_flow"},
		"crem_pairing_unpaired_total":             {"reason", "contradiction", "expired", "replaced", "restart"},
		"crem_csf_close_sent_by_reason_total":     {"reason", "circuit_breaker", "idle", "normal", "param_unanswered", "protocol_error", "resources_exhausted"},
		"crem_crf_close_received_by_reason_total": {"reason", "circuit_breaker", "idle", "normal", "param_unanswered", "protocol_error", "resources_exhausted"},
	}
	for name, w := range want {
		f := fams[name]
		if f == nil {
			t.Errorf("no %s", name)
			continue
		}
		var got []string
		for _, m := range f.Metric {
			if len(m.Label) != 1 || m.Label[0].GetName() != w[0] {
				t.Errorf("%s: labels %v, want %s only", name, m.Label, w[0])
				continue
			}
			got = append(got, m.Label[0].GetValue())
		}
		slices.Sort(got)
		if !slices.Equal(got, w[1:]) {
			t.Errorf("%s{%s}: %q, want %q", name, w[0], got, w[1:])
		}
	}
	for _, name := range []string{"crem_gateway_packets_total", "crem_gateway_bytes_total"} {
		f := fams[name]
		if f == nil {
			t.Errorf("no %s", name)
			continue
		}
		var got []string
		for _, m := range f.Metric {
			l := map[string]string{}
			for _, p := range m.Label {
				l[p.GetName()] = p.GetValue()
			}
			if len(l) != 2 || l["socket"] == "" || l["direction"] == "" {
				t.Errorf("%s: labels %v, want socket and direction", name, m.Label)
			}
			got = append(got, l["direction"]+"/"+l["socket"])
		}
		slices.Sort(got)
		if want := []string{"rx/crem", "rx/local", "rx/tun", "rx/wan", "tx/crem", "tx/local", "tx/tun", "tx/wan"}; !slices.Equal(got, want) {
			t.Errorf("%s: %q, want %q", name, got, want)
		}
	}
	for _, old := range []string{"crem_gateway_rx_packets_crem_total", "crem_gateway_rx_packets_total", "crem_gateway_tx_bytes_total", "crem_gateway_socket_drops_wan_total", "crem_gateway_dropped_tun_total",
		"crem_gateway_crem_discarded_total", "crem_gateway_path_reports_malformed_total", "crem_csf_path_reports_unlisted_total",
		"crem_csf_path_reports_implausible_total", "crem_pairing_unpaired_expired_total"} {
		if fams[old] != nil {
			t.Errorf("%s: a socket or reason in the name", old)
		}
	}
}

// TestBuildInfo: crem_build_info is 1, labelled with the version given (else "dev" in a test
// binary), the Go version and the FEC codec's path as fec.CodecPath reports it.
func TestBuildInfo(t *testing.T) {
	for ver, want := range map[string]string{"": "dev", "v1.2.3": "v1.2.3"} {
		f := families(t, newTestGateway(t, Options{Seed: 1, Version: ver}, nil))["crem_build_info"]
		if f == nil || len(f.Metric) != 1 {
			t.Fatalf("crem_build_info: %v", f)
		}
		m := f.Metric[0]
		got := map[string]string{}
		for _, l := range m.Label {
			got[l.GetName()] = l.GetValue()
		}
		if m.GetGauge().GetValue() != 1 || got["version"] != want || got["goversion"] != runtime.Version() ||
			got["codec_path"] != fec.CodecPath() || len(got) != 3 {
			t.Errorf("version %q: %v = %v, want version %q, goversion %q, codec_path %q", ver, got, m.GetGauge().GetValue(), want, runtime.Version(), fec.CodecPath())
		}
	}
}

// TestFlowGaugesFollowBusiestFlows: the per-flow gauges an operator watches (k, m in force,
// loss estimate, SRTT, breaker state) exist for exactly the flows the per-flow counters cover:
// the 64 busiest of 100.
func TestFlowGaugesFollowBusiestFlows(t *testing.T) {
	fams := families(t, busyGateway(t))
	series := func(name string) []string {
		var out []string
		for _, m := range fams[name].GetMetric() {
			out = append(out, fmt.Sprint(m.Label))
		}
		slices.Sort(out)
		return out
	}
	want := series("crem_csf_flow_sources_total")
	if len(want) != maxLabelledFlows {
		t.Fatalf("crem_csf_flow_sources_total: %d series", len(want))
	}
	for _, name := range []string{"crem_csf_flow_block_sources", "crem_csf_flow_block_repair", "crem_csf_flow_loss_ratio", "crem_csf_flow_srtt_seconds",
		"crem_csf_flow_breaker_state", "crem_csf_flow_state", "crem_csf_flow_source_rate"} {
		if got := series(name); !slices.Equal(got, want) {
			t.Errorf("%s: %d series, not those of crem_csf_flow_sources_total", name, len(got))
		}
		if fams[name].GetType() != dto.MetricType_GAUGE {
			t.Errorf("%s: %v", name, fams[name].GetType())
		}
	}
}

// TestBlockRecoveryHistogramPR18: the CRFs' block recovery times are one histogram,
// crem_crf_block_recovery_seconds, with a series per class (within_m, beyond_m), a bucket per
// bound of crf.Recovery in seconds, the count and the sum; a recovery counted by a CRF shows in
// its class's buckets.
func TestBlockRecoveryHistogramPR18(t *testing.T) {
	var st crf.Stats
	st.RecoveryBeyondM.Buckets[90] = 3 // 3 recoveries of about 0.2 s
	st.RecoveryBeyondM.SumMicros = 600000
	d := prometheus.NewDesc("crem_crf_block_recovery_seconds", "h", []string{"class"}, nil)
	var m dto.Metric
	if err := recoveryHistogram(d, &st.RecoveryBeyondM, "beyond_m").Write(&m); err != nil {
		t.Fatal(err)
	}
	h := m.GetHistogram()
	if h.GetSampleCount() != 3 || h.GetSampleSum() != 0.6 || len(h.GetBucket()) != crf.RecoveryBuckets {
		t.Fatalf("count %d, sum %v, %d buckets", h.GetSampleCount(), h.GetSampleSum(), len(h.GetBucket()))
	}
	for i, b := range h.GetBucket() {
		want := uint64(0)
		if i >= 90 {
			want = 3
		}
		if b.GetCumulativeCount() != want || b.GetUpperBound() != crf.RecoveryBound(i).Seconds() {
			t.Fatalf("bucket %d: le %v count %d, want le %v count %d", i, b.GetUpperBound(), b.GetCumulativeCount(), crf.RecoveryBound(i).Seconds(), want)
		}
	}
	fams := families(t, newTestGateway(t, Options{Seed: 1}, nil))
	f := fams["crem_crf_block_recovery_seconds"]
	if f == nil || f.GetType() != dto.MetricType_HISTOGRAM || len(f.GetMetric()) != 2 {
		t.Fatalf("crem_crf_block_recovery_seconds: %v", f)
	}
	for _, m := range f.GetMetric() {
		if c := m.GetLabel()[0].GetValue(); c != "within_m" && c != "beyond_m" {
			t.Errorf("class %q", c)
		}
	}
}
