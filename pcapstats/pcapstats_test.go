package pcapstats

import (
	"bytes"
	"encoding/binary"
	"net/netip"
	"reflect"
	"strings"
	"testing"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

const (
	qpData  = 0x000048 // the protected QP (HELLO's Flow Label)
	qpAck   = 0x000099 // the requester's QP, receiving ACKs
	qpRead  = 0x000077
	qpBad   = 0x000055
	flowID  = 0x1234abcd
	reqID   = 5
	fbReqID = 6
)

// story builds a capture of one protected flow: HELLO and HELLO_ACK; block 100 (k = 4, PSNs
// 100-103, 101 and 102 dropped and never sent again) with two ordinary repair symbols (one
// dropped), a block-form request and a coded retransmission; block 104 (k = 2, 105 dropped and
// retransmitted by RDMA) with one ordinary symbol, a FALLBACK range request and a Source Copy
// symbol; ACKs, a NAK and an extended ACK; a READ; a packet with a bad ICRC; LOSS_REPORT,
// PATH_REPORT, CLOSE; one malformed and one discarded CREM message; and frames that are not
// CREM or RoCEv2 at all.
func story(t *testing.T) *frames {
	f := &frames{t: t}
	caps := wire.Capabilities{FlowKind: wire.FlowKindRoCEv2, Schemes: wire.SchemeSet(0).With(wire.SchemeCauchy),
		MaxK: 64, MaxM: 8, MaxT: 4200, RDMAMTU: 4096}
	f.crem(toCRF, &wire.Hello{Capabilities: caps, SenderNonce: 7, Source: hostA, Destination: hostB, FlowLabel: qpData}, false)
	f.crem(toCSF, &wire.HelloAck{FlowID: flowID, Capabilities: caps, AF: wire.AF4, SenderNonce: 7, MaxOpenBlocks: 64}, false)
	for p := uint32(100); p < 106; p++ {
		f.data(qpData, p, p == 101 || p == 102 || p == 105)
	}
	sym := bytes.Repeat([]byte{0xaa}, 66)
	full4, full2 := bitmap(4, 0, 1, 2, 3), bitmap(2, 0, 1)
	f.crem(toCRF, &wire.Repair{FlowID: flowID, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairIndex: 0,
		BlockStartPSN: 100, Present: full4, Symbol: sym}, false)
	f.crem(toCRF, &wire.Repair{FlowID: flowID, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairIndex: 1, Last: true,
		BlockStartPSN: 100, Present: full4, Symbol: sym}, true)
	f.crem(toCRF, &wire.Repair{FlowID: flowID, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 2, RepairIndex: 0, Last: true,
		BlockStartPSN: 104, Present: full2, Symbol: sym}, false)
	f.crem(toCSF, &wire.RepairRequest{FlowID: flowID, RequestID: reqID, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4,
		RepairsHeld: 1, BlockStartPSN: 100, SuggestedM: 1, Lost: bitmap(4, 1, 2)}, false)
	f.crem(toCRF, &wire.Repair{FlowID: flowID, Retx: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairIndex: 2,
		BlockStartPSN: 100, RepairSessionID: reqID, Present: full4, Lost: bitmap(4, 1, 2), Symbol: sym}, false)
	// RDMA retransmits 105.
	f.data(qpData, 105, false)
	f.crem(toCSF, &wire.RepairRequest{FlowID: flowID, RangeForm: true, Fallback: true, RequestID: fbReqID,
		Ranges: []psn.Range{{Start: 104, Count: 2}}}, false)
	f.crem(toCRF, &wire.Repair{FlowID: flowID, ConfigID: 1, Scheme: wire.SchemeSourceCopy, K: 2, RepairIndex: 1,
		BlockStartPSN: 104, RepairSessionID: fbReqID, Present: full2, Symbol: sym[:10]}, false)
	f.crem(toCRF, &wire.Repair{FlowID: flowID, Info: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 2,
		BlockStartPSN: 104, Present: full2}, false)

	// The reverse direction: an ACK, a NAK, an extended ACK (T/C AETH), a dropped ACK.
	ack := func(a roce.AETH, tc bool, dropped bool) {
		p := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, DestQP: qpAck, PSN: 103}, AETH: a}
		if tc {
			p.Headers = roce.HasTCAETH
			p.TCAETH = roce.TCAETH{LastFinished: 100, NumSegs: 1, Segs: [3]roce.Segment{{Left: 103, Right: 103}}}
		}
		f.roce(roceBA, p, dropped, false)
	}
	ack(roce.ACK(roce.CreditInvalid, 1), false, false)
	ack(roce.NAK(roce.NAKPSNSequenceError, 1), false, false)
	ack(roce.ACK(roce.CreditInvalid, 1), true, false)
	ack(roce.RNRNAK(3, 1), false, true)
	// A READ: request to the responder, response to the requester.
	f.roce(roceAB, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadRequest, DestQP: qpRead, PSN: 500},
		RETH: roce.RETH{VA: 0x1000, RKey: 9, DMALength: 64}}, false, false)
	f.roce(roceBA, roce.Packet{BTH: roce.BTH{OpCode: roce.OpReadResponseOnly, DestQP: qpAck, PSN: 500},
		AETH: roce.ACK(roce.CreditInvalid, 2), Payload: make([]byte, 64)}, false, false)
	// A SEND whose ICRC is wrong.
	f.roce(roceAB, roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, DestQP: qpBad, PSN: 9}, Payload: []byte("hi")}, false, true)

	f.crem(toCSF, &wire.LossReport{FlowID: flowID, IntervalUS: 1000, Expected: 6, Received: 3, Restored: 2, CEMarked: 1,
		RepairsReceived: 4}, false)
	f.crem([2]netip.AddrPort{toCSF[0], toCSF[1]}, &wire.PathReport{Method: wire.MethodNodeDrops, Source: hostA, Destination: hostB,
		FlowLabel: qpData, Hops: []wire.HopEntry{{NodeID: 1, LostCount: 3, Cause: wire.CauseCongestion, DroppedPSNs: []psn.PSN{101, 102}}}}, false)
	f.crem(toCRF, &wire.Close{FlowID: flowID, Reason: wire.ReasonIdle}, false)

	// A REPAIR cut short (malformed) and a message of Version 2 (discarded silently).
	good, _ := (&wire.Close{FlowID: flowID}).Append(nil)
	f.udp(toCRF, good[:10], false)
	bad := append([]byte(nil), good...)
	bad[0] = 2<<4 | byte(wire.TypeClose)
	f.udp(toCRF, bad, false)

	// Not CREM, not RoCEv2: DNS; an ARP frame; an IP fragment; a frame cut by the snap length.
	dns := [2]netip.AddrPort{roceAB[0], netip.AddrPortFrom(hostB, 53)}
	f.udp(dns, []byte("not a query"), false)
	arp := make([]byte, 60)
	binary.BigEndian.PutUint16(arp[12:], 0x0806)
	f.list, f.orig = append(f.list, arp), append(f.orig, 60)
	frag := append([]byte(nil), f.udp(dns, []byte("fragment"), false)...)
	frag[14+6] |= 0x20 // More Fragments
	f.list[len(f.list)-1] = frag
	cut := f.udp(toCRF, good, false)
	f.list[len(f.list)-1] = cut[:30]
	return f
}

func wantStory() Summary {
	flowMsgs := MessageCounts{Total: 12, Repair: 6, HelloAck: 1, RepairRequest: 2, LossReport: 1, Close: 1,
		Malformed: 1, Dropped: 1}
	repair := RepairCounts{Ordinary: 3, CodedRetx: 1, SourceCopy: 1, Info: 1, Last: 2, SymbolOctets: 66*4 + 10, Delivered: 4}
	requests := RequestCounts{Total: 2, BlockForm: 1, RangeForm: 1, Coded: 1, Fallback: 1, LostPositions: 2, RangePSNs: 2}
	loss := LossTotals{Count: 1, IntervalUS: 1000, Expected: 6, Received: 3, Restored: 2, CEMarked: 1, RepairsReceived: 4}
	closes := CloseReasons{Idle: 1}
	// Block 100: 101 and 102 missing, 2 symbols delivered (one ordinary, one coded
	// retransmission): 2. Block 104: nothing missing (105 retransmitted): 0.
	restored := RestoredEstimate{Packets: 2, Missing: 2, Blocks: 2}
	allMsgs := flowMsgs
	allMsgs.Total, allMsgs.Hello, allMsgs.PathReport, allMsgs.Discarded = 15, 1, 1, 1
	data := QP{DestQP: qpData, QPCounts: QPCounts{Packets: 7, DataPackets: 7, Retransmissions: 1, ICRCOK: 7, Dropped: 3,
		MissingPSNs: 2}}
	acks := QP{DestQP: qpAck, QPCounts: QPCounts{Packets: 5, DataPackets: 1, ReadResponses: 1, ACKs: 2, NAKs: 1,
		NAKSequence: 1, RNRNAKs: 1, ExtendedACKs: 1, ICRCOK: 5, Dropped: 1}}
	read := QP{DestQP: qpRead, QPCounts: QPCounts{Packets: 1, ReadRequests: 1, ICRCOK: 1}}
	bad := QP{DestQP: qpBad, QPCounts: QPCounts{Packets: 1, DataPackets: 1, ICRCBad: 1}}
	var total QPCounts
	for _, q := range []QP{data, acks, read, bad} {
		total.add(&q.QPCounts)
	}
	return Summary{
		Frames: Frames{Total: 33, UDP: 30, NotUDP: 1, Fragments: 1, Cut: 1, OtherUDP: 1, Dropped: 5},
		CREM: CREM{Port: testCREMPort, Messages: allMsgs, Repair: repair, Blocks: 2, RepairRequests: requests,
			LossReports: loss, PathReports: PathTotals{Total: 1, NodeDrops: 1, Hops: 1, LostCount: 3, DroppedPSNs: 2,
				Flows: []PathFlow{{Source: "10.0.0.1", Destination: "10.0.0.2", FlowLabel: qpData, Reports: 1, LostCount: 3,
					DroppedPSNs: 2, PSNs: []uint32{101, 102}}}},
			Closes: closes, Hellos: HelloCounts{Answered: 1}, Restored: restored,
			Flows: []Flow{{FlowID: flowID, Addresses: []string{"192.0.2.1 -> 192.0.2.2"},
				Hello:    &FlowHello{Source: "10.0.0.1", Destination: "10.0.0.2", FlowKind: 1, FlowLabel: qpData, DestQP: qpData, RDMAMTU: 4096},
				Messages: flowMsgs, Repair: repair, Blocks: 2, ConfigIDs: []uint8{1}, RepairRequests: requests,
				LossReports: loss, Closes: closes, Restored: restored}}},
		RoCE: RoCE{Port: roce.UDPPort, QPCounts: total, QPs: []QP{data, acks, read, bad}},
	}
}

// Every count of the story, exactly: messages by type, REPAIR kinds (ordinary, coded
// retransmission with RETX and the Repair Session ID, Source Copy, INFO), request kinds, the
// LOSS_REPORT, PATH_REPORT and CLOSE figures (RULINGS C2, C10), blocks, the restored estimate,
// and per QP data, retransmissions, ACK/NAK/RNR NAK, extended ACKs (RULINGS T2), READs, ICRC.
func TestStoryExactCountsC14(t *testing.T) {
	f := story(t)
	got := f.analyze(Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort, DropsMarked: true})
	want := wantStory()
	if got.CREM.Messages.FirstMalformed == "" || got.CREM.Flows[0].Messages.FirstMalformed == "" {
		t.Errorf("no first malformed message named: %+v", got.CREM.Messages)
	}
	got.CREM.Messages.FirstMalformed, got.CREM.Flows[0].Messages.FirstMalformed = "", ""
	compare(t, got, want)
}

func compare(t *testing.T, got, want Summary) {
	t.Helper()
	if !reflect.DeepEqual(got.Frames, want.Frames) {
		t.Errorf("frames\n got %+v\nwant %+v", got.Frames, want.Frames)
	}
	gf, wf := got.CREM.Flows, want.CREM.Flows
	got.CREM.Flows, want.CREM.Flows = nil, nil
	if !reflect.DeepEqual(got.CREM, want.CREM) {
		t.Errorf("crem\n got %+v\nwant %+v", got.CREM, want.CREM)
	}
	if len(gf) != len(wf) {
		t.Fatalf("%d flows, want %d: %+v", len(gf), len(wf), gf)
	}
	for i := range gf {
		if !reflect.DeepEqual(gf[i], wf[i]) {
			t.Errorf("flow %d\n got %+v\nwant %+v", i, gf[i], wf[i])
		}
		if gf[i].Hello != nil && wf[i].Hello != nil && *gf[i].Hello != *wf[i].Hello {
			t.Errorf("hello %+v, want %+v", *gf[i].Hello, *wf[i].Hello)
		}
	}
	if !reflect.DeepEqual(got.RoCE, want.RoCE) {
		t.Errorf("roce\n got %+v\nwant %+v", got.RoCE, want.RoCE)
	}
}

// The same story through Read, as classic pcap and as pcapng, gives the same summary.
func TestReadPcapAndPcapNG(t *testing.T) {
	f := story(t)
	o := Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort, DropsMarked: true}
	want := f.analyze(o)
	for name, b := range map[string][]byte{"pcap": f.pcap(), "pcapng": f.pcapng()} {
		got, err := Read(bytes.NewReader(b), o)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if name == "pcap" {
			// Classic pcap keeps the cut frame whole (WriteFrame writes its captured length
			// as its original one): it is undecodable instead of cut.
			want := want
			want.Frames.Cut, want.Frames.Undecodable = 0, 1
			got.Frames.FirstError = ""
			compare(t, got, want)
			continue
		}
		compare(t, got, want)
	}
	if _, err := Read(strings.NewReader("not a capture at all"), o); err == nil {
		t.Error("a file that is no capture read without error")
	}
	b := f.pcap()
	s, err := Read(bytes.NewReader(b[:len(b)-5]), o)
	if err == nil || s.Frames.Total != uint64(len(f.list)-1) {
		t.Errorf("cut file: %v, %d frames", err, s.Frames.Total)
	}
}

// Without drop marks every frame is delivered: nothing is missing, the restored estimate is 0,
// and the TTL-1 frames count as any other.
func TestDropsUnmarked(t *testing.T) {
	s := story(t).analyze(Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort})
	if s.Frames.Dropped != 0 || s.CREM.Messages.Dropped != 0 || s.RoCE.Dropped != 0 || s.RoCE.MissingPSNs != 0 {
		t.Errorf("drops counted unmarked: %+v %+v", s.Frames, s.RoCE.QPCounts)
	}
	if r := s.CREM.Restored; r.Packets != 0 || r.Missing != 0 || r.Blocks != 2 {
		t.Errorf("restored estimate %+v", r)
	}
	if s.CREM.Repair.Delivered != 5 {
		t.Errorf("%d symbols delivered, want all 5", s.CREM.Repair.Delivered)
	}
}

// A capture taken after the loss, where lost packets never appear: the missing positions are
// those of the blocks never seen, and the estimate is the same.
func TestDownstreamCapture(t *testing.T) {
	f := story(t)
	var keep [][]byte
	var orig []int
	for i, b := range f.list {
		if d, err := capture.DecodeUDP(capture.LinkEthernet, b); err == nil && d.IPHeader[8] == 1 {
			continue
		}
		keep, orig = append(keep, b), append(orig, f.orig[i])
	}
	f.list, f.orig = keep, orig
	s := f.analyze(Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort})
	if r := s.CREM.Restored; r != (RestoredEstimate{Packets: 2, Missing: 2, Blocks: 2}) {
		t.Errorf("restored estimate %+v", r)
	}
}

// C14: there is no default CREM port; the ports must be valid and distinct.
func TestOptionsC14(t *testing.T) {
	for _, o := range []Options{{}, {CREMPort: 70000}, {CREMPort: 4791, RoCEPort: 4791}, {CREMPort: 1, RoCEPort: -1},
		{CREMPort: 1, Limits: Limits{MaxQPs: -1}}} {
		if _, err := New(o); err == nil {
			t.Errorf("%+v: no error", o)
		}
	}
	if _, err := Read(bytes.NewReader(nil), Options{}); err == nil || !strings.Contains(err.Error(), "C14") {
		t.Errorf("no CREM port: %v", err)
	}
}

// --roce-port 0 takes RoCEv2 on any port (the lab's path) and leaves its ICRC unchecked; what
// does not parse as RoCEv2 stays other UDP.
func TestAnyRoCEPort(t *testing.T) {
	f := &frames{t: t}
	ends := [2]netip.AddrPort{netip.AddrPortFrom(hostA, 40000), netip.AddrPortFrom(hostB, 40001)}
	f.roce(ends, roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, DestQP: 3, PSN: 1}, Payload: []byte("abcd")}, false, false)
	f.roce(ends, roce.Packet{BTH: roce.BTH{OpCode: roce.OpSendOnly, DestQP: 3, PSN: 1}, Payload: []byte("abcd")}, false, false)
	f.udp(ends, []byte("plainly not RoCEv2"), false)
	s := f.analyze(Options{CREMPort: testCREMPort})
	if s.RoCE.Packets != 2 || s.RoCE.Retransmissions != 1 || s.RoCE.ICRCUnchecked != 2 || s.Frames.OtherUDP != 1 {
		t.Errorf("%+v %+v", s.RoCE.QPCounts, s.Frames)
	}
	s = f.analyze(Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort})
	if s.RoCE.Packets != 0 || s.Frames.OtherUDP != 3 {
		t.Errorf("port 4791 only: %+v %+v", s.RoCE.QPCounts, s.Frames)
	}
}

// The bounds hold: flows, blocks, QPs and PSNs beyond them are counted as untracked, and the
// totals still count everything.
func TestLimits(t *testing.T) {
	f := &frames{t: t}
	sym := make([]byte, 8)
	for i := range 5 {
		f.crem(toCRF, &wire.Repair{FlowID: uint32(i + 1), Scheme: wire.SchemeXOR, K: 2, BlockStartPSN: psn.PSN(10 * i),
			Present: bitmap(2, 0, 1), Symbol: sym}, false)
		f.crem(toCRF, &wire.Repair{FlowID: 1, Scheme: wire.SchemeXOR, K: 2, BlockStartPSN: psn.PSN(100 + 10*i),
			Present: bitmap(2, 0, 1), Symbol: sym}, false)
		f.data(uint32(i), 1, false)
		f.data(0, uint32(i+10), false)
	}
	s := f.analyze(Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort, Limits: Limits{MaxFlows: 2, MaxBlocks: 4, MaxQPs: 3, MaxPSNs: 4}})
	if len(s.CREM.Flows) != 2 || s.CREM.FlowsUntracked != 3 || s.CREM.Blocks != 4 || s.CREM.BlocksUntracked != 3 ||
		s.CREM.Messages.Repair != 10 {
		t.Errorf("crem: %d flows, %+v", len(s.CREM.Flows), s.CREM)
	}
	if len(s.RoCE.QPs) != 3 || s.RoCE.QPsUntracked != 2 || s.RoCE.PSNsUntracked != 4 || s.RoCE.Packets != 8 {
		t.Errorf("roce: %+v", s.RoCE)
	}
}

// Over IPv6 a hop limit of 1 marks a drop as TTL 1 does over IPv4, and a flow's address pairs
// are written CSF -> CRF whichever way its messages went.
func TestIPv6DropsAndAddresses(t *testing.T) {
	csf, crf := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	f := &frames{t: t}
	up := [2]netip.AddrPort{netip.AddrPortFrom(csf, 1), netip.AddrPortFrom(crf, testCREMPort)}
	down := [2]netip.AddrPort{netip.AddrPortFrom(crf, 2), netip.AddrPortFrom(csf, testCREMPort)}
	f.crem(up, &wire.Repair{FlowID: 9, Scheme: wire.SchemeXOR, K: 1, BlockStartPSN: 1, Present: bitmap(1, 0), Symbol: make([]byte, 4)}, true)
	f.crem(down, &wire.LossReport{FlowID: 9, Expected: 1}, false)
	s := f.analyze(Options{CREMPort: testCREMPort, RoCEPort: roce.UDPPort, DropsMarked: true})
	if s.Frames.Dropped != 1 || s.CREM.Messages.Dropped != 1 || s.CREM.Repair.Delivered != 0 || len(s.CREM.Flows) != 1 {
		t.Fatalf("%+v %+v", s.Frames, s.CREM)
	}
	if a := s.CREM.Flows[0].Addresses; !reflect.DeepEqual(a, []string{"2001:db8::1 -> 2001:db8::2"}) {
		t.Errorf("addresses %q", a)
	}
	if r := s.CREM.Flows[0].Restored; r.Unmapped != 1 || r.Packets != 0 {
		t.Errorf("a flow without HELLO: %+v", r)
	}
}
