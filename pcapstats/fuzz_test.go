package pcapstats

import (
	"net/netip"
	"testing"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/roce"
)

// The analysis never panics on arbitrary frames, and its totals stay consistent: every frame is
// counted once by kind, every UDP datagram once by destination, and the per-QP figures add up to
// the RoCEv2 totals.
func FuzzAnalyze(f *testing.F) {
	st := story(&testing.T{})
	for _, b := range st.list {
		f.Add(b, false)
	}
	f.Add([]byte{}, true)
	f.Fuzz(func(t *testing.T, frame []byte, anyPort bool) {
		o := Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort, DropsMarked: true}
		if anyPort {
			o.RoCEPort = 0
		}
		a, err := New(o)
		if err != nil {
			t.Fatal(err)
		}
		// The frame alone, then after the story (so that it meets known flows, blocks and QPs),
		// and also as a bare UDP payload to the CREM and the RoCEv2 port.
		a.Frame(capture.LinkEthernet, frame, len(frame))
		for _, b := range st.list {
			a.Frame(capture.LinkEthernet, b, len(b))
		}
		a.Frame(capture.LinkEthernet, frame, len(frame)+1)
		a.Frame(capture.LinkRaw, frame, len(frame))
		for _, ends := range [][2]netip.AddrPort{toCRF, toCSF, roceAB, roceBA} {
			h := capture.FrameHeader{Src: ends[0], Dst: ends[1]}
			if b, err := capture.AppendUDPFrame(nil, h, frame); err == nil {
				a.Frame(capture.LinkEthernet, b, len(b))
			}
		}
		s := a.Summary()
		fr := s.Frames
		if fr.UDP+fr.NotUDP+fr.Fragments+fr.Cut+fr.Undecodable != fr.Total {
			t.Fatalf("frames do not add up: %+v", fr)
		}
		var roceTotal uint64
		for _, q := range s.RoCE.QPs {
			roceTotal += q.Packets
		}
		if roceTotal != s.RoCE.Packets {
			t.Fatalf("QPs hold %d packets, the total is %d", roceTotal, s.RoCE.Packets)
		}
		m := s.CREM.Messages
		if m.Total != m.Repair+m.Hello+m.HelloAck+m.ParamUpdate+m.ParamAck+m.RepairRequest+m.LossReport+m.PathReport+
			m.Close+m.Discarded+m.Malformed {
			t.Fatalf("messages do not add up: %+v", m)
		}
		if fr.UDP != m.Total+s.RoCE.Packets+s.RoCE.QPsUntracked+s.RoCE.NoBTH+fr.OtherUDP {
			t.Fatalf("datagrams do not add up: %+v, %d CREM, %+v", fr, m.Total, s.RoCE)
		}
	})
}
