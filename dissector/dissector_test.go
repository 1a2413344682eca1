package dissector

import (
	"bytes"
	"encoding/hex"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

const cremPort = 50123

// messages returns one of each of the nine CREM messages, the Appendix REPAIR first.
func messages(t *testing.T) []wire.Message {
	t.Helper()
	sym, _ := hex.DecodeString("00354fdf6d4b40b57e5c400000000000")
	var present, lost psn.Bitmap
	for j := 0; j < 4; j++ {
		present.Set(j)
	}
	for j := 0; j < 3; j++ {
		lost.Set(j)
	}
	caps := wire.Capabilities{FlowKind: wire.FlowKindRoCEv2, Schemes: wire.SchemeSet(0).With(wire.SchemeCauchy).With(wire.SchemeSourceCopy),
		MaxK: 64, MaxM: 16, MaxT: 4130, RDMAMTU: 4096}
	return []wire.Message{
		&wire.Repair{FlowID: 0xBEEF, Retx: true, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairIndex: 2,
			BlockStartPSN: 0x1000, RepairSessionID: 7, Present: present, Lost: lost, Symbol: sym},
		&wire.Hello{Capabilities: caps, SenderNonce: 0x0102030405060708, Source: netip.MustParseAddr("192.0.2.1"),
			Destination: netip.MustParseAddr("192.0.2.2"), FlowLabel: 0x000123},
		&wire.HelloAck{FlowID: 0xBEEF, Capabilities: caps, AF: wire.AF4, SenderNonce: 0x0102030405060708, MaxOpenBlocks: 64},
		&wire.ParamUpdate{FlowID: 0xBEEF, ConfigID: 2, Scheme: wire.SchemeCauchy, K: 32, M: 4, T: 1058, EffectivePSN: 0x2000},
		&wire.ParamAck{FlowID: 0xBEEF, ConfigID: 2, Status: wire.StatusLimitsExceeded},
		&wire.RepairRequest{FlowID: 0xBEEF, RequestID: 7, ConfigID: 1, Scheme: wire.SchemeCauchy, K: 4, RepairsHeld: 2,
			BlockStartPSN: 0x1000, SuggestedM: 1, Lost: lost},
		&wire.LossReport{FlowID: 0xBEEF, IntervalUS: 25000, Expected: 1000, Received: 990, Restored: 9, IncompleteBlocks: 1,
			CEMarked: 3, RepairsReceived: 125, RepairsCEMarked: 1},
		&wire.PathReport{Method: wire.MethodNodeDrops, Source: netip.MustParseAddr("192.0.2.1"), Destination: netip.MustParseAddr("192.0.2.2"),
			FlowLabel: 0x123, Hops: []wire.HopEntry{{NodeID: 9, MarkingPeriodNumber: 4, LostCount: 2, QueueDelayChangeUS: -15,
				Cause: wire.CauseCongestion, DroppedPSNs: []psn.PSN{0x1001, 0x1002}}}},
		&wire.Close{FlowID: 0xBEEF, Reason: wire.ReasonCircuitBreaker},
	}
}

// TestDissectorAgreesWithEncoder writes each CREM message with package wire into a capture and
// checks that tshark, running crem.lua, reads back the draft's fields.
func TestDissectorAgreesWithEncoder(t *testing.T) {
	tshark := testenv.Tshark(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "crem.pcap")
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	hdr := capture.FrameHeader{
		Src: netip.MustParseAddrPort("192.0.2.1:40000"),
		Dst: netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), cremPort),
	}
	at := time.Unix(1_800_000_000, 0)
	for i, m := range messages(t) {
		b, err := m.Append(nil)
		if err != nil {
			t.Fatalf("message %d (%v): %v", i, m.Type(), err)
		}
		if err := w.WriteUDP(at.Add(time.Duration(i)*time.Millisecond), hdr, b); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	fields := []string{"crem.type", "crem.flow_id", "crem.length", "crem.k", "crem.repair_index", "crem.block_start_psn",
		"crem.repair_session_id", "crem.lost_source_bitmap", "crem.symbol", "crem.dest_qp", "crem.max_open_blocks",
		"crem.effective_psn", "crem.status", "crem.suggested_m", "crem.request_id", "crem.received", "crem.dropped_psn",
		"crem.queue_delay_change_us", "crem.reason"}
	args := []string{"-X", "lua_script:crem.lua", "-o", "crem.port:50123", "-r", file, "-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.Command(tshark, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	var rows [][]string
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.HasPrefix(line, "Running as user") {
			continue
		}
		rows = append(rows, strings.Split(line, "|"))
	}
	if len(rows) != 9 {
		t.Fatalf("tshark printed %d rows, want 9:\n%s", len(rows), out)
	}
	col := map[string]int{}
	for i, f := range fields {
		col[f] = i
	}
	check := func(row int, field, want string) {
		t.Helper()
		if got := rows[row][col[field]]; got != want {
			t.Errorf("message %d %s = %q, want %q", row+1, field, got, want)
		}
	}
	for i := 0; i < 9; i++ {
		check(i, "crem.type", []string{"1", "2", "3", "4", "5", "6", "7", "8", "9"}[i])
	}
	// The Appendix REPAIR, field by field.
	check(0, "crem.flow_id", "0x0000beef")
	check(0, "crem.length", "44")
	check(0, "crem.k", "4")
	check(0, "crem.repair_index", "2")
	check(0, "crem.block_start_psn", "4096")
	check(0, "crem.repair_session_id", "7")
	check(0, "crem.lost_source_bitmap", "e0000000")
	check(0, "crem.symbol", "00354fdf6d4b40b57e5c400000000000")
	check(1, "crem.dest_qp", "0x00000123")
	check(2, "crem.max_open_blocks", "64")
	check(3, "crem.effective_psn", "8192")
	check(4, "crem.status", "2")
	check(5, "crem.suggested_m", "1")
	check(5, "crem.request_id", "7")
	check(6, "crem.received", "990")
	check(7, "crem.dropped_psn", "4097,4098")
	check(7, "crem.queue_delay_change_us", "-15")
	check(8, "crem.reason", "4")
}

// TestDissectorNeedsThePort: without the domain's CREM port the dissector claims nothing,
// since the draft assigns no default port.
func TestDissectorNeedsThePort(t *testing.T) {
	tshark := testenv.Tshark(t)
	file := filepath.Join(t.TempDir(), "one.pcap")
	var buf bytes.Buffer
	w, _ := capture.NewWriter(&buf)
	b, err := (&wire.Close{FlowID: 1, Reason: wire.ReasonNormal}).Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	hdr := capture.FrameHeader{Src: netip.MustParseAddrPort("192.0.2.1:40000"), Dst: netip.MustParseAddrPort("192.0.2.2:50123")}
	if err := w.WriteUDP(time.Unix(1_800_000_000, 0), hdr, b); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(tshark, "-X", "lua_script:crem.lua", "-r", file, "-T", "fields", "-e", "crem.type").CombinedOutput()
	if err != nil {
		t.Fatalf("tshark: %v\n%s", err, out)
	}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if strings.TrimSpace(line) != "" && !strings.HasPrefix(line, "Running as user") {
			t.Fatalf("dissected without a configured port: %q", line)
		}
	}
}

// TestDissectorCREMPortIsDestination: the draft sends every CREM message to the CREM port, so
// a datagram that has the port only as its source is not CREM. The lab's path sockets, bound to
// the CREM port, forward RoCEv2 that way: an RC ACKNOWLEDGE to a higher port (first octet 0x11, which would read
// as Version 1 REPAIR) from the CREM port is left to the InfiniBand dissector and gets its
// tcaeth tree, and a CREM message to the port is still CREM.
func TestDissectorCREMPortIsDestination(t *testing.T) {
	tshark := testenv.Tshark(t)
	ack := extendedACK(t, roce.OpAcknowledge, 100, roce.TCAETH{LastFinished: 100})
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Unix(1_800_000_000, 0)
	fromPort := capture.FrameHeader{Src: netip.MustParseAddrPort("192.0.2.1:50123"), Dst: netip.MustParseAddrPort("192.0.2.2:60000")}
	toPort := capture.FrameHeader{Src: netip.MustParseAddrPort("192.0.2.1:50123"), Dst: netip.MustParseAddrPort("192.0.2.2:50123")}
	if err := w.WriteUDP(at, fromPort, ack); err != nil {
		t.Fatal(err)
	}
	if err := w.WriteUDP(at.Add(time.Millisecond), toPort, encode(t, &wire.Close{FlowID: 1, Reason: wire.ReasonNormal})); err != nil {
		t.Fatal(err)
	}
	file := writeFile(t, "port.pcap", buf.Bytes())
	fields := []string{"crem.type", "crem.malformed", "infiniband.bth.opcode", "tcaeth.segment_num"}
	rows := tsharkRows(t, tshark, file, []string{"-o", "crem.port:50123"}, fields)
	if len(rows) != 2 {
		t.Fatalf("tshark printed %d frames, want 2", len(rows))
	}
	if got := rows[1][:2]; !slices.Equal(got, []string{"", ""}) {
		t.Errorf("ACK from the CREM port taken for CREM: crem.type, crem.malformed = %q", got)
	}
	if got := rows[2][0]; got != "9" {
		t.Errorf("CLOSE to the CREM port: crem.type %q, want 9", got)
	}
	// Decoded as InfiniBand on its other port, the ACK has its T/C AETH.
	rows = tsharkRows(t, tshark, file, []string{"-o", "crem.port:50123", "-d", "udp.port==60000,infiniband"}, fields)
	if got, want := rows[1], []string{"", "", "17", "1"}; !slices.Equal(got, want) {
		t.Errorf("ACK from the CREM port: crem.type, crem.malformed, opcode, segment_num = %q, want %q", got, want)
	}
}
