package gateway

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strings"
	"time"
	"unicode"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
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
	g.tun.addCounters(m)
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

// snake turns a Go field name into a metric name part: RepairSent -> repair_sent.
func snake(s string) string {
	var b strings.Builder
	rs := []rune(s)
	for i, r := range rs {
		if unicode.IsUpper(r) {
			if i > 0 && (unicode.IsLower(rs[i-1]) || (i+1 < len(rs) && unicode.IsLower(rs[i+1]))) {
				b.WriteByte('_')
			}
			b.WriteRune(unicode.ToLower(r))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

// collector exposes Stats to Prometheus; names are derived from the engines' field names,
// so every counter an engine adds appears without a change here.
type collector struct{ g *Gateway }

// Collector returns a Prometheus collector of every counter of the gateway.
func (g *Gateway) Collector() prometheus.Collector { return collector{g} }

func (collector) Describe(ch chan<- *prometheus.Desc) {} // unchecked collector: names follow the engines

func (c collector) Collect(ch chan<- prometheus.Metric) {
	st := c.g.Stats()
	emitStruct(ch, "crem_csf_", reflect.ValueOf(st.Sender))
	emitStruct(ch, "crem_crf_", reflect.ValueOf(st.Receiver))
	emitStruct(ch, "crem_pairing_", reflect.ValueOf(st.Pairing))
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_gateway_flows", "outbound flows with a CSF", nil, nil),
		prometheus.GaugeValue, float64(st.Flows))
	l := st.Live
	live := prometheus.NewDesc("crem_gateway_live_flows", "flows protected now: CSF sessions established, flows the CRF serves", []string{"half"}, nil)
	ch <- prometheus.MustNewConstMetric(live, prometheus.GaugeValue, float64(l.CSFEstablished), "csf")
	ch <- prometheus.MustNewConstMetric(live, prometheus.GaugeValue, float64(l.CRFFlows), "crf")
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_gateway_csf_sessions", "CSFs asking for a session (HELLO) or established", nil, nil),
		prometheus.GaugeValue, float64(l.CSFSessions))
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_gateway_crf_pending_sessions", "CRF sessions pending since their HELLO, unproven", nil, nil),
		prometheus.GaugeValue, float64(l.CRFPending))
	crfMem := prometheus.NewDesc("crem_gateway_crf_bytes", "octets the CRFs keep: repair symbols (kept), packets held for in-order delivery (held)", []string{"what"}, nil)
	ch <- prometheus.MustNewConstMetric(crfMem, prometheus.GaugeValue, float64(l.CRFKeptBytes), "kept")
	ch <- prometheus.MustNewConstMetric(crfMem, prometheus.GaugeValue, float64(l.CRFHeldBytes), "held")
	tables := prometheus.NewDesc("crem_gateway_table_entries", "entries of the gateway's bounded tables", []string{"table"}, nil)
	for _, t := range []struct {
		name string
		v    int
	}{{"csf", l.Senders}, {"crf_routes", l.ReceiverRoutes}, {"nonces", l.Nonces}} {
		ch <- prometheus.MustNewConstMetric(tables, prometheus.GaugeValue, float64(t.v), t.name)
	}
	bufs := prometheus.NewDesc("crem_gateway_buffers_held", "packet buffers held, free or in use", []string{"size"}, nil)
	ch <- prometheus.MustNewConstMetric(bufs, prometheus.GaugeValue, float64(l.BuffersSmall), "small")
	ch <- prometheus.MustNewConstMetric(bufs, prometheus.GaugeValue, float64(l.BuffersLarge), "large")
	gro := int(c.g.gro.heldNow.Load()) // coalesced receive buffers (relay.offload)
	ch <- prometheus.MustNewConstMetric(bufs, prometheus.GaugeValue, float64(gro), "gro")
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_gateway_buffer_bytes", "octets of packet buffers held", nil, nil),
		prometheus.GaugeValue, float64(l.BuffersSmall*smallSize+l.BuffersLarge*bufSize+gro*groBufSize))
	c.perFlow(ch)
	for k, v := range st.Gateway {
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_gateway_"+k+"_total", "gateway counter "+k, nil, nil),
			prometheus.CounterValue, float64(v))
	}
}

func emitStruct(ch chan<- prometheus.Metric, prefix string, v reflect.Value) {
	t := v.Type()
	for i := range v.NumField() {
		f, fv := t.Field(i), v.Field(i)
		if !f.IsExported() {
			continue
		}
		name := prefix + snake(f.Name)
		switch fv.Kind() {
		case reflect.Uint64:
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name+"_total", t.Name()+"."+f.Name, nil, nil),
				prometheus.CounterValue, float64(fv.Uint()))
		case reflect.Struct:
			emitStruct(ch, name+"_", fv)
		case reflect.Array:
			d := prometheus.NewDesc(name+"_total", t.Name()+"."+f.Name+" by CLOSE reason", []string{"reason"}, nil)
			for j := range fv.Len() {
				ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(fv.Index(j).Uint()), fmt.Sprint(j))
			}
		}
	}
}

// ServeMetrics serves /metrics and /healthz on addr until ctx ends. /metrics has the
// gateway's collector and the Go runtime's and the process's (go_*, process_*).
func (g *Gateway) ServeMetrics(ctx context.Context, ln net.Listener) error {
	reg := prometheus.NewRegistry()
	for _, c := range []prometheus.Collector{g.Collector(), collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{})} {
		if err := reg.Register(c); err != nil {
			return fmt.Errorf("gateway: metrics: %w", err)
		}
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

// MetricsAddress returns the configured metrics address ("" for none).
func (g *Gateway) MetricsAddress() string { return g.cfg.metricsAddr }

// perFlow emits a few counters per flow, labelled, for the busiest flows of each half
// (maxLabelledFlows of each, by smoothed source rate) as the shards last published.
func (c collector) perFlow(ch chan<- prometheus.Metric) {
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
	l := []string{"src", "dst", "qp"}
	for _, r := range outs {
		src, dst, qp := r.key.Src.String(), r.key.Dst.String(), fmt.Sprint(r.key.DestQP)
		for _, m := range []struct {
			name string
			v    uint64
		}{{"sources", r.st.Sources}, {"sources_unprotected", r.st.SourcesUnprotected}, {"repair_sent", r.st.RepairSent},
			{"retx_sent", r.st.RetxSent}, {"source_copy_sent", r.st.SourceCopySent}, {"requests_received", r.st.RequestsReceived},
			{"unprotected", r.st.Unprotected}, {"repair_denied_budget", r.st.RepairDeniedBudget}} {
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_csf_flow_"+m.name+"_total", "per flow: csf.Stats", l, nil),
				prometheus.CounterValue, float64(m.v), src, dst, qp)
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_csf_flow_state", "per flow: the session state (0 idle, 1 hello, 2 unprotected, 3 established, 4 closed)", l, nil),
			prometheus.GaugeValue, float64(r.state), src, dst, qp)
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_csf_flow_source_rate", "per flow: sources per second, smoothed over 10 s (ranks the busiest)", l, nil),
			prometheus.GaugeValue, r.rate, src, dst, qp)
	}
	seen := map[uint32]bool{} // two shards' CRFs may have drawn one Flow ID: one series
	for _, r := range ins {
		if seen[r.id] {
			continue
		}
		seen[r.id] = true
		id := fmt.Sprintf("%#08x", r.id)
		for _, m := range []struct {
			name string
			v    uint64
		}{{"sources", r.st.Sources}, {"restored", r.st.Restored}, {"icrc_mismatch", r.st.ICRCMismatch},
			{"abandoned", r.st.Abandoned}, {"blocks_evicted", r.st.BlocksEvicted}, {"requests", r.st.Requests}} {
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_crf_flow_"+m.name+"_total", "per flow: crf.FlowStats", []string{"flow_id"}, nil),
				prometheus.CounterValue, float64(m.v), id)
		}
		ch <- prometheus.MustNewConstMetric(prometheus.NewDesc("crem_crf_flow_source_rate", "per flow: sources per second, smoothed over 10 s (ranks the busiest)", []string{"flow_id"}, nil),
			prometheus.GaugeValue, r.rate, id)
	}
}

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
