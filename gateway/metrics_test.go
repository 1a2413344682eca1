//go:build linux

package gateway

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/cremtest"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
	"github.com/prometheus/client_golang/prometheus"
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

// TestBusiestFlowsLabelled: with 100 flows in each half, the per-flow series are those
// of the 64 busiest (smoothed source rate), which include the 20 flows that carry traffic now;
// the live-flow gauges count all. Before, past 64 flows no flow had series at all (and the first
// 64 would have been the oldest, not the busiest).
func TestBusiestFlowsLabelled(t *testing.T) {
	c := relayConfig()
	c.Protect = []ProtectRule{{SrcPort: 5000}}
	g, err := New(c, Options{Seed: 1, Sockets: Sockets{CREM: cremSocket(t)}})
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
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
