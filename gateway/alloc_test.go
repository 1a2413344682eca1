package gateway_test

import (
	"net"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/gateway"
	"github.com/crem-project/crem/internal/harness/cremtest"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/wire"
)

// TestRelayNoAllocs: once warm, relaying protected traffic through two gateways (CSF and CRF
// at work, k = 32, m = 4) allocates nothing per packet, with UDP GSO and GRO (A sends the
// relayed packets and the repair in runs, B splits the coalesced receives) and without.
func TestRelayNoAllocs(t *testing.T) {
	if testing.Short() {
		t.Skip("moves 30000 packets")
	}
	if testenv.Race {
		t.Skip("the race detector allocates")
	}
	for _, offload := range []bool{true, false} {
		name := "offload"
		if !offload {
			name = "no-offload"
		}
		t.Run(name, func(t *testing.T) { testRelayNoAllocs(t, offload) })
	}
}

func testRelayNoAllocs(t *testing.T, offload bool) {
	target, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer target.Close()
	target.SetReadBuffer(8 << 20)
	ep, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	defer ep.Close()
	port := uint16(ep.LocalAddr().(*net.UDPAddr).Port)
	off := false
	pol := gateway.PolicyConfig{K: new(32), M: new(4), Adapt: &off, BurstGap: gateway.Dur(time.Millisecond)}
	rule := []gateway.ProtectRule{{SrcPort: port}}
	a, b, stop := startRelayPairWith(t, target.LocalAddr().(*net.UDPAddr).AddrPort(), rule, pol, offload, 1)
	defer stop()
	desc := flow.Descriptor{Kind: wire.FlowKindRoCEv2, Src: netip.MustParseAddr("127.0.0.1"), Dst: netip.MustParseAddr("127.0.0.1"), DestQP: 0x42, SrcPort: uint16(port)}
	syn := cremtest.Synth{Desc: desc, PSN: 1}
	pk := syn.Next(1024)
	next := uint32(0)
	got := make(chan int, 1)
	go func() {
		buf := make([]byte, 9000)
		n := 0
		for {
			target.SetReadDeadline(time.Now().Add(time.Second))
			if _, _, err := target.ReadFromUDPAddrPort(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	to := a.RelayAddr()
	burst := func(n int) {
		for i := range n {
			next = (next + 1) & 0xffffff
			pk[9], pk[10], pk[11] = byte(next>>16), byte(next>>8), byte(next)
			ep.WriteToUDPAddrPort(pk, to)
			if i%32 == 31 {
				time.Sleep(200 * time.Microsecond)
			}
		}
	}
	burst(12000) // warm: the CSF's held blocks and the CRF's window fill once
	time.Sleep(100 * time.Millisecond)
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	const n = 20000
	burst(n)
	time.Sleep(100 * time.Millisecond)
	runtime.ReadMemStats(&m1)
	per := float64(m1.Mallocs-m0.Mallocs) / n
	st := b.Stats()
	t.Logf("%s: %.4f allocations per packet; B's CRF: %d sources, A's CSF: %d repair", fec.CodecPath(), per, st.Receiver.Flows.Sources, a.Stats().Sender.RepairSent)
	t.Logf("packet buffers allocated: A %d, B %d", a.Stats().Gateway["buffers_allocated"], st.Gateway["buffers_allocated"])
	t.Logf("kernel drops: A local %d, B wan %d, B crem %d", a.Stats().Gateway["socket_drops_local"], st.Gateway["socket_drops_wan"], st.Gateway["socket_drops_crem"])
	if a.Stats().Sender.RepairSent == 0 || st.Receiver.Flows.Sources == 0 {
		t.Fatal("the flow was not protected")
	}
	if per > 0.05 {
		t.Fatalf("%s: %.3f allocations per relayed packet, want none in steady state", fec.CodecPath(), per)
	}
	ga := a.Stats().Gateway
	t.Logf("A: %d GSO sends of %d datagrams; B: %d coalesced receives of %d datagrams, %d copied out",
		ga["gso_sends"], ga["gso_datagrams"], st.Gateway["gro_receives"], st.Gateway["gro_datagrams"], st.Gateway["gro_copied"])
	if offload && (ga["gso_sends"] == 0 || st.Gateway["gro_receives"] == 0) {
		t.Skip("offload on, yet A sent no GSO run or B coalesced nothing: the kernel lacks UDP GSO or GRO")
	}
	if !offload && (ga["gso_sends"] != 0 || st.Gateway["gro_receives"] != 0) {
		t.Fatalf("offload off: %d GSO sends, %d coalesced receives", ga["gso_sends"], st.Gateway["gro_receives"])
	}
}
