package roce

import (
	"bytes"
	"encoding/binary"
	"errors"
	"net/netip"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/psn"
)

// handGSI builds a RoCEv2 packet to QP 1 octet by octet from the layout (IBTA Vol. 1, 9.2 BTH,
// 9.3.3 DETH, 13.4.2 the common MAD header): opcode 0x64 UD SEND ONLY, partition key 0xffff,
// destination QP 1, PSN 0x000007; DETH Q_Key 0x80010000, source QP 1; the MAD; a zero ICRC.
func handGSI(mad []byte) []byte {
	b := []byte{0x64, 0x00, 0xff, 0xff, 0x00, 0x00, 0x00, 0x01, 0x00, 0x00, 0x00, 0x07}
	b = append(b, 0x80, 0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x01)
	b = append(b, mad...)
	return append(b, 0, 0, 0, 0)
}

// handMAD is a CM MAD's common header, octet by octet: BaseVersion 1, class 0x07, class
// version 2, method 0x03 (Send), status 0, class specific 0, the transaction ID, the
// attribute ID, reserved, attribute modifier 0; then 232 octets of data.
func handMAD(tid uint64, attr uint16) []byte {
	m := make([]byte, MADLen)
	m[0], m[1], m[2], m[3] = 1, 0x07, 2, 0x03
	binary.BigEndian.PutUint64(m[8:], tid)
	binary.BigEndian.PutUint16(m[16:], attr)
	return m
}

// handREQ is a ConnectRequest (IBTA Vol. 1, 12.6.5) whose fields are placed by their offsets in
// the MAD data (the MAD's octet 24 on).
func handREQ() []byte {
	m := handMAD(0x1122334455667788, 0x0010)
	d := m[24:]
	copy(d[0:], []byte{0xca, 0xfe, 0x00, 0x01})                          // Local Communication ID
	copy(d[8:], []byte{0x00, 0x00, 0x00, 0x00, 0x01, 0x06, 0x12, 0xb7})  // Service ID: RDMA IP CM, TCP port 4791
	copy(d[16:], []byte{0x02, 0x11, 0x22, 0xff, 0xfe, 0x33, 0x44, 0x55}) // Local CA GUID
	copy(d[28:], []byte{0x00, 0x00, 0x00, 0x00})                         // Local Q_Key (RC: unused)
	copy(d[32:], []byte{0x00, 0x01, 0x5a, 0x10})                         // Local QPN 0x00015a, Responder Resources 16
	copy(d[36:], []byte{0x00, 0x00, 0x00, 0x08})                         // Local EECN 0, Initiator Depth 8
	copy(d[40:], []byte{0x00, 0x00, 0x00, 0xb9})                         // Remote EECN 0; timeout 23, RC (0), flow control on: 10111 00 1
	copy(d[44:], []byte{0xfe, 0xdc, 0xba, 0xbf})                         // Starting PSN 0xfedcba; timeout 23, retries 7: 10111 111
	copy(d[48:], []byte{0xff, 0xff, 0x57, 0xf0})                         // P_Key; MTU 5 (4096), RDC 0, RNR 7: 0101 0 111; max CM retries 15
	copy(d[52:], []byte{0xff, 0xff, 0xff, 0xff})                         // primary LIDs (RoCE: permissive)
	copy(d[56:], netip.MustParseAddr("::ffff:10.1.0.1").AsSlice())       // primary local GID
	copy(d[72:], netip.MustParseAddr("::ffff:10.2.0.1").AsSlice())       // primary remote GID
	return m
}

// handREP is the ConnectReply (IBTA Vol. 1, 12.6.8) to handREQ.
func handREP() []byte {
	m := handMAD(0x1122334455667788, 0x0013)
	d := m[24:]
	copy(d[0:], []byte{0xbe, 0xef, 0x00, 0x02})                          // Local Communication ID
	copy(d[4:], []byte{0xca, 0xfe, 0x00, 0x01})                          // Remote Communication ID: the REQ's
	copy(d[12:], []byte{0x00, 0x02, 0x7b, 0x00})                         // Local QPN 0x00027b
	copy(d[20:], []byte{0x00, 0x00, 0x05, 0x00})                         // Starting PSN 0x000005
	copy(d[24:], []byte{0x10, 0x08, 0x7b, 0xe0})                         // resources 16, depth 8; delay 15, failover 1, e2e 1; RNR 7, SRQ 0
	copy(d[28:], []byte{0x02, 0x66, 0x77, 0xff, 0xfe, 0x88, 0x99, 0xaa}) // Local CA GUID
	return m
}

func wantREQ() CMReq {
	return CMReq{LocalCommID: 0xcafe0001, ServiceID: 0x00000000010612b7, LocalCAGUID: 0x021122fffe334455,
		LocalQPN: 0x00015a, ResponderResources: 16, InitiatorDepth: 8, RemoteCMResponseTimeout: 23,
		TransportService: CMTransportRC, EndToEndFlowControl: true, StartingPSN: 0xfedcba,
		LocalCMResponseTimeout: 23, RetryCount: 7, PKey: 0xffff, PathMTU: 5, RNRRetryCount: 7, MaxCMRetries: 15,
		PrimaryLocalLID: 0xffff, PrimaryRemoteLID: 0xffff,
		PrimaryLocalGID:  netip.MustParseAddr("::ffff:10.1.0.1").As16(),
		PrimaryRemoteGID: netip.MustParseAddr("::ffff:10.2.0.1").As16()}
}

func wantREP() CMRep {
	return CMRep{LocalCommID: 0xbeef0002, RemoteCommID: 0xcafe0001, LocalQPN: 0x00027b, StartingPSN: 5,
		ResponderResources: 16, InitiatorDepth: 8, TargetACKDelay: 15, FailoverAccepted: 1, EndToEndFlowControl: true,
		RNRRetryCount: 7, LocalCAGUID: 0x026677fffe8899aa}
}

// TestParseCMReqRep: a REQ and a REP built octet by octet from the specification's layout
// parse to the QPNs, Starting PSNs and Communication IDs placed in them, and the encoders give
// back the same octets.
func TestParseCMReqRep(t *testing.T) {
	req, err := ParseCM(handGSI(handREQ()))
	if err != nil {
		t.Fatal(err)
	}
	if req.SrcQP != 1 || req.QKey != GSIQKey || req.Header.AttributeID != CMAttrREQ || req.Header.TransactionID != 0x1122334455667788 ||
		req.Header.MgmtClass != MgmtClassCM || req.Header.ClassVersion != 2 {
		t.Fatalf("REQ: DETH and header %+v", req)
	}
	if req.Req != wantREQ() {
		t.Fatalf("REQ\n got %+v\nwant %+v", req.Req, wantREQ())
	}
	rep, err := ParseCM(handGSI(handREP()))
	if err != nil {
		t.Fatal(err)
	}
	if rep.Header.AttributeID != CMAttrREP || rep.Rep != wantREP() {
		t.Fatalf("REP\n got %+v\nwant %+v", rep.Rep, wantREP())
	}
	if rep.Req != (CMReq{}) || req.Rep != (CMRep{}) {
		t.Fatal("a REQ fills only Req, a REP only Rep")
	}
	mad, err := wantREQ().AppendMAD(nil, 0x1122334455667788)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mad, handREQ()) {
		t.Fatalf("REQ encoded\n% x\nby hand\n% x", mad, handREQ())
	}
	if mad, _ = wantREP().AppendMAD(nil, 0x1122334455667788); !bytes.Equal(mad, handREP()) {
		t.Fatalf("REP encoded\n% x\nby hand\n% x", mad, handREP())
	}
	pk, err := AppendGSIPacket(nil, 0xffff, 7, handREQ())
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(pk, handGSI(handREQ())) {
		t.Fatalf("GSI packet encoded\n% x\nby hand\n% x", pk, handGSI(handREQ()))
	}
	if !IsGSI(pk) {
		t.Fatal("IsGSI: a UD SEND ONLY to QP 1 is GSI")
	}
}

// TestParseCMErrors: what is not a CM MAD says so (ErrNotCM), what ends early or is of
// the wrong size says that (ErrShort, ErrInvalid); nothing panics.
func TestParseCMErrors(t *testing.T) {
	good := handGSI(handREQ())
	mod := func(f func(b []byte) []byte) []byte { return f(bytes.Clone(good)) }
	for _, tc := range []struct {
		name string
		pkt  []byte
		want error
	}{
		{"empty", nil, ErrShort},
		{"BTH only", good[:12], ErrShort},
		{"no MAD", good[:20], ErrShort},
		{"MAD short by one", append(bytes.Clone(good[:20+255]), 0, 0, 0, 0), ErrShort},
		{"MAD long by four", append(bytes.Clone(good[:20+256]), 0, 0, 0, 0, 0, 0, 0, 0), ErrInvalid},
		{"pad beyond the packet", mod(func(b []byte) []byte { b[1] = 0x30; return b[:24] }), ErrShort},
		{"RC SEND to QP 1", mod(func(b []byte) []byte { b[0] = 0x04; return b }), ErrNotCM},
		{"UD SEND to QP 2", mod(func(b []byte) []byte { b[7] = 2; return b }), ErrNotCM},
		{"subnet administration class", mod(func(b []byte) []byte { b[20+1] = 0x03; return b }), ErrNotCM},
		{"base version 2", mod(func(b []byte) []byte { b[20] = 2; return b }), ErrInvalid},
	} {
		_, err := ParseCM(tc.pkt)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: %v, want %v", tc.name, err, tc.want)
		}
	}
	if IsGSI(good[:11]) || IsGSI(mod(func(b []byte) []byte { b[7] = 3; return b })) {
		t.Error("IsGSI: short packets and other QPs are not GSI")
	}
	if _, err := (CMReq{LocalQPN: 1 << 24}).AppendMAD(nil, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("a 25-bit QPN: %v", err)
	}
	if _, err := (CMRep{StartingPSN: 1 << 24}).AppendMAD(nil, 1); !errors.Is(err, ErrInvalid) {
		t.Errorf("a 25-bit PSN: %v", err)
	}
	if _, err := AppendGSIPacket(nil, 0xffff, 0, make([]byte, 255)); !errors.Is(err, ErrInvalid) {
		t.Errorf("a 255-octet MAD: %v", err)
	}
	if _, err := ParseCMMAD(make([]byte, 100)); !errors.Is(err, ErrShort) {
		t.Errorf("a 100-octet MAD: %v", err)
	}
}

// FuzzParseCM: ParseCM never panics; a REQ or REP it accepts encodes back to a MAD that parses
// to the same fields.
func FuzzParseCM(f *testing.F) {
	f.Add(handGSI(handREQ()))
	f.Add(handGSI(handREP()))
	f.Add(handGSI(handMAD(1, CMAttrRTU)))
	f.Add([]byte{0x64, 0, 0xff, 0xff, 0, 0, 0, 1, 0, 0, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := ParseCM(b)
		if err != nil {
			return
		}
		var mad []byte
		switch m.Header.AttributeID {
		case CMAttrREQ:
			mad, err = m.Req.AppendMAD(nil, m.Header.TransactionID)
		case CMAttrREP:
			mad, err = m.Rep.AppendMAD(nil, m.Header.TransactionID)
		default:
			return
		}
		if err != nil {
			t.Fatalf("a parsed message does not encode: %v", err)
		}
		back, err := ParseCMMAD(mad)
		if err != nil {
			t.Fatalf("an encoded message does not parse: %v", err)
		}
		if back.Req != m.Req || back.Rep != m.Rep {
			t.Fatalf("round trip\n%+v\n%+v", m, back)
		}
	})
}

// TestTsharkAgreesOnCM: Wireshark's InfiniBand dissector, reading a pcap of the REQ and
// the REP above (IPv4, UDP 4791, ICRC sealed), finds a CM ConnectRequest and ConnectReply with
// the same QPNs, Starting PSNs, Communication IDs and transport service.
func TestTsharkAgreesOnCM(t *testing.T) {
	path := filepath.Join(t.TempDir(), "cm.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := capture.NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	a, b := netip.MustParseAddr("10.1.0.1"), netip.MustParseAddr("10.2.0.1")
	for i, x := range []struct {
		src, dst netip.Addr
		mad      []byte
	}{{a, b, handREQ()}, {b, a, handREP()}} {
		pk := handGSI(x.mad)
		lh := LogicalHeader{Src: x.src, Dst: x.dst, SrcPort: 49152}
		if err := lh.Seal(pk); err != nil {
			t.Fatal(err)
		}
		h := capture.FrameHeader{Src: netip.AddrPortFrom(x.src, 49152), Dst: netip.AddrPortFrom(x.dst, UDPPort)}
		if err := w.WriteUDP(time.Unix(1700000000+int64(i), 0), h, pk); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	rows := tsharkFields(t, path, "infiniband.bth.destqp", "infiniband.deth.srcqp", "infiniband.mad.mgmtclass",
		"infiniband.mad.attributeid", "infiniband.mad.transactionid",
		"infiniband.cm.req", "infiniband.cm.req.localqpn", "infiniband.cm.req.startpsn", "infiniband.cm.req.transpsvctype",
		"infiniband.cm.rep", "infiniband.cm.rep.remotecommid", "infiniband.cm.rep.localqpn", "infiniband.cm.rep.startpsn")
	if len(rows) != 2 {
		t.Fatalf("tshark decodes %d InfiniBand frames, want 2: %v", len(rows), rows)
	}
	for frame, want := range map[int][]uint64{
		1: {1, 1, 0x07, 0x0010, 0x1122334455667788, 0xcafe0001, 0x00015a, 0xfedcba, CMTransportRC},
		2: {1, 1, 0x07, 0x0013, 0x1122334455667788, 0xbeef0002, 0xcafe0001, 0x00027b, 0x000005},
	} {
		row := rows[frame]
		var got []uint64
		for _, s := range row {
			if s != "" {
				got = append(got, num(t, s))
			}
		}
		if len(got) != len(want) {
			t.Fatalf("frame %d: tshark gives %q, want values %#x", frame, row, want)
		}
		for i := range want {
			if got[i] != want[i] {
				t.Errorf("frame %d field %d: tshark %#x, want %#x (row %q)", frame, i, got[i], want[i], row)
			}
		}
	}
	// And ParseCM reads the sealed packets the same.
	if m, err := ParseCM(handGSI(handREQ())); err != nil || m.Req.LocalQPN != 0x15a || m.Req.StartingPSN != psn.PSN(0xfedcba) {
		t.Fatalf("ParseCM: %+v %v", m.Req, err)
	}
}
