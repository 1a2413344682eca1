package gateway_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// flowGauges returns the per-flow series of a /metrics text whose name starts with
// crem_csf_flow_, by name (one flow crosses: one series each).
func flowGauges(text string) map[string]float64 {
	out := map[string]float64{}
	for _, l := range strings.Split(text, "\n") {
		if !strings.HasPrefix(l, "crem_csf_flow_") {
			continue
		}
		name, _, _ := strings.Cut(l, "{")
		v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64)
		if err == nil {
			out[name] = v
		}
	}
	return out
}

// TestFlowGaugesOfProtectedFlow: through a relay pair on loopback, gateway A's /metrics shows
// what an operator watches of the protected flow: k and m of the code in force (those of the
// CSF's latest k and m), its loss estimate (a ratio), an SRTT of the loopback's size in
// seconds and the breaker closed.
func TestFlowGaugesOfProtectedFlow(t *testing.T) {
	ep, target := boundUDP(t), boundUDP(t)
	port := uint16(ep.LocalAddr().(*net.UDPAddr).Port)
	a, _, stop := startRelayPair(t, addrOf(target), []gateway.ProtectRule{{SrcPort: port}}, gateway.PolicyConfig{})
	defer stop()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go a.ServeMetrics(ctx, ln)
	url := "http://" + ln.Addr().String() + "/metrics"
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: port}
	syn := cremtest.Synth{Desc: desc, PSN: 100}
	var text string
	var g map[string]float64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		if _, err := ep.WriteToUDPAddrPort(syn.Next(512), a.RelayAddr()); err != nil {
			t.Fatal(err)
		}
		r, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(r.Body)
		r.Body.Close()
		text, g = string(b), flowGauges(string(b))
		if g["crem_csf_flow_block_sources"] > 0 && g["crem_csf_flow_srtt_seconds"] > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no k or SRTT for the flow: %v", g)
		}
	}
	sf, ok := a.SenderFlow(flow.Key{Src: desc.Src, Dst: desc.Dst, DestQP: desc.DestQP})
	if !ok || len(sf.KM) == 0 {
		t.Fatalf("no CSF for the flow, or no k and m: %+v", sf)
	}
	last := sf.KM[len(sf.KM)-1]
	if g["crem_csf_flow_block_sources"] != float64(last.K) || g["crem_csf_flow_block_repair"] != float64(last.M) {
		t.Errorf("k %v m %v, the CSF's latest k and m %+v", g["crem_csf_flow_block_sources"], g["crem_csf_flow_block_repair"], last)
	}
	if l := g["crem_csf_flow_loss_ratio"]; l < 0 || l > 1 {
		t.Errorf("loss estimate %v: not a ratio", l)
	}
	if s := g["crem_csf_flow_srtt_seconds"]; s <= 0 || s > 1 {
		t.Errorf("SRTT %v s on loopback", s)
	}
	if b, ok := g["crem_csf_flow_breaker_state"]; !ok || b != 0 {
		t.Errorf("breaker state %v (present %v), want 0: closed", b, ok)
	}
	var sample []string
	for _, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "crem_csf_flow_") || strings.HasPrefix(l, "crem_build_info") || strings.HasPrefix(l, "crem_gateway_packets_total") {
			sample = append(sample, l)
		}
	}
	t.Logf("gateway A's /metrics:\n%s", strings.Join(sample, "\n"))
}
