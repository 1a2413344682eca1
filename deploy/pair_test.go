package deploy

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/wire"
)

// patience bounds the waits for what must happen: far beyond a busy machine's delays.
const patience = 30 * time.Second

func bound(t *testing.T) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// livePair runs gateways A and B in relay mode on loopback (each CREM socket bound to a free
// port beforehand and handed over: there is no default CREM port), moves one protected flow
// from A to B until B's CRF serves it, and returns the /metrics text of each, so that the
// per-flow series of both halves exist.
func livePair(t *testing.T) (metricsA, metricsB string) {
	t.Helper()
	aCREM, bCREM, bWAN, target, ep := bound(t), bound(t), bound(t), bound(t), bound(t)
	port := uint16(ep.LocalAddr().(*net.UDPAddr).Port)
	rule := []gateway.ProtectRule{{SrcPort: port}}
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan struct{}
	t.Cleanup(func() {
		cancel()
		for _, d := range done {
			<-d
		}
	})
	start := func(c gateway.Config, s gateway.Sockets) (*gateway.Gateway, string) {
		g, err := gateway.New(c, gateway.Options{Seed: 1, Sockets: s})
		if err != nil {
			t.Fatal(err)
		}
		d := make(chan struct{})
		done = append(done, d)
		go func() { defer close(d); g.Run(ctx) }()
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		go g.ServeMetrics(ctx, ln)
		return g, "http://" + ln.Addr().String() + "/metrics"
	}
	_, urlB := start(gateway.Config{Peer: aCREM.LocalAddr().(*net.UDPAddr).AddrPort(), Protect: rule, Shards: 1,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: target.LocalAddr().(*net.UDPAddr).AddrPort(), PeerData: netip.MustParseAddrPort("127.0.0.1:9")}},
		gateway.Sockets{CREM: bCREM, WAN: bWAN})
	a, urlA := start(gateway.Config{Peer: bCREM.LocalAddr().(*net.UDPAddr).AddrPort(), Protect: rule, Shards: 1,
		Relay: gateway.RelayConfig{Listen: netip.MustParseAddrPort("127.0.0.1:0"), Target: netip.MustParseAddrPort("127.0.0.1:9"), WANListen: netip.MustParseAddrPort("127.0.0.1:0"), PeerData: bWAN.LocalAddr().(*net.UDPAddr).AddrPort()}},
		gateway.Sockets{CREM: aCREM})
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: port}
	syn := cremtest.Synth{Desc: desc, PSN: 100}
	// Sources until A's CSF is established and B's CRF counts the flow's sources.
	for deadline := time.Now().Add(patience); ; time.Sleep(5 * time.Millisecond) {
		if _, err := ep.WriteToUDPAddrPort(syn.Next(512), a.RelayAddr()); err != nil {
			t.Fatal(err)
		}
		mb := scrape(t, urlB)
		if a.Stats().Sender.ParamAccepted > 0 && strings.Contains(mb, "crem_crf_flow_sources_total{") &&
			!strings.Contains(mb, "crem_crf_flows_sources_total 0\n") {
			return scrape(t, urlA), mb
		}
		if time.Now().After(deadline) {
			t.Fatalf("the flow was never protected end to end: A %+v", a.Stats().Sender)
		}
	}
}

func scrape(t *testing.T, url string) string {
	t.Helper()
	r, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Body.Close()
	b, err := io.ReadAll(r.Body)
	if err != nil || r.StatusCode != 200 {
		t.Fatalf("GET %s: %d %v", url, r.StatusCode, err)
	}
	return string(b)
}

// exported returns every metric name of a Prometheus text exposition: the families (# TYPE)
// with the series names a histogram or summary adds (_bucket, _sum, _count), and every
// sample's name.
func exported(text string) (map[string]bool, error) {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if f := strings.Fields(line); len(f) == 4 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
			switch f[3] {
			case "histogram":
				names[f[2]+"_bucket"], names[f[2]+"_sum"], names[f[2]+"_count"] = true, true, true
			case "summary":
				names[f[2]+"_sum"], names[f[2]+"_count"] = true, true
			}
			continue
		}
		if line == "" || line[0] == '#' {
			continue
		}
		n := strings.IndexAny(line, "{ ")
		if n <= 0 {
			return nil, fmt.Errorf("exposition line %q: no metric name", line)
		}
		names[line[:n]] = true
	}
	return names, sc.Err()
}
