package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/harness/lab"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
)

// runPcapCLI runs "crem args..." in process.
func runPcapCLI(t *testing.T, args ...string) (code int, out, errOut string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, stdio{in: strings.NewReader(""), out: &o, err: &e})
	return code, o.String(), e.String()
}

// lastLine returns the last line of s.
func lastLine(s string) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return lines[len(lines)-1]
}

// pcapRealCapture returns the real RoCEv2 capture, read in place from ../shared beside the
// repository, or skips the test.
func pcapRealCapture(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			break
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Skip("no go.mod above the test directory; cannot find ../shared/testdata/roce")
		}
		dir = parent
	}
	p := filepath.Join(dir, "..", "shared", "testdata", "roce", "hiroce-send-ack.pcap")
	if _, err := os.Stat(p); err != nil {
		t.Skipf("real capture not available (shared test data is kept beside the repository, never copied into it): %v", err)
	}
	return p
}

// Section 6: crem pcap verify on the real capture finds all 105 RoCEv2 packets, every ICRC
// good, and exits 0; the summary is the last line, exactly.
func TestPcapVerifyRealCaptureSection6(t *testing.T) {
	path := pcapRealCapture(t)
	code, out, errOut := runPcapCLI(t, "pcap", "verify", path)
	if code != 0 || out != "roce: 105 packets, 105 icrc ok, 0 icrc bad\n" || errOut != "" {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
}

// Section 6: --each lists every packet (frame, addresses, QP, opcode, PSN, verdict) before the
// summary, and may come before or after FILE.
func TestPcapVerifyEachSection6(t *testing.T) {
	path := pcapRealCapture(t)
	for _, args := range [][]string{
		{"pcap", "verify", "--each", path},
		{"pcap", "verify", path, "--each"},
		{"pcap", "verify", "-each", "--", path},
	} {
		code, out, _ := runPcapCLI(t, args...)
		lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
		if code != 0 || len(lines) != 106 || lines[105] != "roce: 105 packets, 105 icrc ok, 0 icrc bad" {
			t.Fatalf("%v: exit %d, %d lines, last %q", args, code, len(lines), lastLine(out))
		}
		if want := "frame 15: 192.168.70.4:69 -> 192.168.70.6:4791 qp 0x000048 SEND_ONLY_WITH_IMMEDIATE psn 0 icrc ok"; lines[0] != want {
			t.Errorf("%v: first line %q, want %q", args, lines[0], want)
		}
		if want := "frame 18: 192.168.70.6:72 -> 192.168.70.4:4791 qp 0x000045 SEND_LAST_WITH_IMMEDIATE psn 1 icrc ok"; lines[3] != want {
			t.Errorf("%v: fourth line %q, want %q", args, lines[3], want)
		}
	}
}

// Section 6: exit status 2 with the reason on standard error when the file cannot be read:
// missing, not a capture, cut short inside a record; and for usage errors.
func TestPcapVerifyUnreadableSection6(t *testing.T) {
	dir := t.TempDir()
	notCapture := filepath.Join(dir, "notes.txt")
	os.WriteFile(notCapture, []byte("this is not a capture file at all"), 0o644)
	cut := filepath.Join(dir, "cut.pcap")
	b := writeRoCECapture(t, filepath.Join(dir, "whole.pcap"), -1)
	os.WriteFile(cut, b[:len(b)-7], 0o644)
	for _, c := range []struct {
		args   []string
		reason string
	}{
		{[]string{"pcap", "verify", filepath.Join(dir, "missing.pcap")}, "no such file"},
		{[]string{"pcap", "verify", notCapture}, "neither pcap nor pcapng"},
		{[]string{"pcap", "verify", cut}, "unexpected EOF"},
		{[]string{"pcap", "verify"}, "exactly one FILE"},
		{[]string{"pcap", "verify", cut, cut}, "exactly one FILE"},
		{[]string{"pcap", "verify", "--bogus", cut}, "flag provided but not defined"},
		{[]string{"pcap", "frobnicate"}, "unknown subcommand"},
	} {
		code, out, errOut := runPcapCLI(t, c.args...)
		if code != 2 || !strings.Contains(errOut, c.reason) {
			t.Errorf("%v: exit %d, err %q, want 2 and %q", c.args[2:], code, errOut, c.reason)
		}
		if c.reason == "unexpected EOF" && !strings.HasPrefix(lastLine(out), "roce: ") {
			t.Errorf("cut file: the packets before the cut are still summed up: %q", out)
		}
	}
}

// Section 6: --help explains the command for a newcomer and exits 0.
func TestPcapHelpSection6(t *testing.T) {
	for _, c := range []struct {
		args  []string
		wants []string
	}{
		{[]string{"pcap", "--help"}, []string{"verify FILE", "pcapng"}},
		{[]string{"pcap", "verify", "--help"}, []string{"4791", "ICRC", "roce: N packets, N icrc ok, N icrc bad", "--each", "Exit status", "IPv6", "VLAN"}},
	} {
		code, out, errOut := runPcapCLI(t, c.args...)
		text := out + errOut
		if code != 0 {
			t.Errorf("%v: exit %d", c.args, code)
		}
		for _, w := range c.wants {
			if !strings.Contains(text, w) {
				t.Errorf("%v: help does not mention %q:\n%s", c.args, w, text)
			}
		}
	}
}

// rocePkt is one packet of the written capture and what tshark should see in it.
type rocePkt struct {
	from, to netip.AddrPort
	vlans    []uint16
	p        roce.Packet
}

// roceTraffic is a little of every kind of RC traffic: a SEND split in three (with pad), an
// RDMA WRITE, a READ and its responses, an atomic and its answer, plain and extended ACKs, a
// CNP; over IPv4, IPv4 in two VLAN tags, and IPv6.
func roceTraffic() []rocePkt {
	a4 := netip.MustParseAddrPort("10.1.0.1:49152")
	b4 := netip.MustParseAddrPort("10.1.0.2:4791")
	a4r := netip.MustParseAddrPort("10.1.0.2:49153")
	b4r := netip.MustParseAddrPort("10.1.0.1:4791")
	a6 := netip.MustParseAddrPort("[2001:db8::1]:50000")
	b6 := netip.MustParseAddrPort("[2001:db8::2]:4791")
	a6r := netip.MustParseAddrPort("[2001:db8::2]:50001") // RoCEv2 answers go to 4791 as well
	b6r := netip.MustParseAddrPort("[2001:db8::1]:4791")
	bth := func(op roce.Opcode, qp uint32, p psn.PSN) roce.BTH {
		return roce.BTH{OpCode: op, PKey: 0xffff, DestQP: qp, PSN: p}
	}
	kb := bytes.Repeat([]byte{0x5a}, 1024)
	tc := roce.TCAETH{LastFinished: 101, NumSegs: 1, Segs: [3]roce.Segment{{Left: 103, Right: 104}}}
	return []rocePkt{
		{a4, b4, nil, roce.Packet{BTH: bth(roce.OpSendFirst, 0x11, 100), Payload: kb}},
		{a4, b4, nil, roce.Packet{BTH: bth(roce.OpSendMiddle, 0x11, 101), Payload: kb}},
		{a4, b4, nil, roce.Packet{BTH: bth(roce.OpSendLast, 0x11, 102), Payload: []byte("end")}},
		{a4r, b4r, nil, roce.Packet{BTH: bth(roce.OpAcknowledge, 0x22, 102), AETH: roce.ACK(31, 1)}},
		{a4, b4, []uint16{100, 200}, roce.Packet{BTH: bth(roce.OpWriteOnly, 0x11, 103), RETH: roce.RETH{VA: 0x1000, RKey: 7, DMALength: 5}, Payload: []byte("hello")}},
		{a4, b4, []uint16{100, 200}, roce.Packet{BTH: bth(roce.OpReadRequest, 0x11, 104), RETH: roce.RETH{VA: 0x2000, RKey: 7, DMALength: 2048}}},
		{a4r, b4r, []uint16{100, 200}, roce.Packet{BTH: bth(roce.OpReadResponseFirst, 0x22, 104), AETH: roce.ACK(31, 2), Payload: kb}},
		{a4r, b4r, []uint16{100, 200}, roce.Packet{BTH: bth(roce.OpReadResponseLast, 0x22, 105), AETH: roce.ACK(31, 2), Payload: kb}},
		{a6, b6, nil, roce.Packet{BTH: bth(roce.OpFetchAdd, 0x33, 7), AtomicETH: roce.AtomicETH{VA: 0x3000, RKey: 9, SwapAdd: 1}}},
		{a6r, b6r, nil, roce.Packet{BTH: bth(roce.OpAtomicAcknowledge, 0x44, 7), AETH: roce.ACK(31, 3), AtomicAckETH: roce.AtomicAckETH{OrigRemData: 41}}},
		{a6, b6, nil, roce.Packet{BTH: bth(roce.OpSendOnlyWithImmediate, 0x33, 8), ImmDt: 0xfeed, Payload: []byte("6")}},
		{a6r, b6r, nil, roce.Packet{BTH: bth(roce.OpAcknowledge, 0x44, 8), AETH: roce.NAK(roce.NAKPSNSequenceError, 3)}},
		{a4r, b4r, nil, roce.Packet{BTH: bth(roce.OpAcknowledge, 0x22, 101), Headers: roce.HasTCAETH, AETH: roce.ACK(31, 1), TCAETH: tc}},
		{a4r, b4r, nil, roce.Packet{BTH: bth(roce.OpCNP, 0x22, 0), Payload: make([]byte, 16)}},
	}
}

// writeRoCECapture builds roceTraffic with roce, seals each ICRC under its flow's logical
// header, wraps it with capture into a pcap at path, and returns the file; the packet at
// index corrupt (if any) gets one payload bit flipped after sealing.
func writeRoCECapture(t *testing.T, path string, corrupt int) []byte {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	for i, rp := range roceTraffic() {
		pkt, err := rp.p.Append(nil)
		if err != nil {
			t.Fatalf("packet %d: %v", i, err)
		}
		h := roce.LogicalHeader{Src: rp.from.Addr(), Dst: rp.to.Addr(), SrcPort: rp.from.Port()}
		if err := h.Seal(pkt); err != nil {
			t.Fatal(err)
		}
		if i == corrupt {
			pkt[len(pkt)-roce.ICRCLen-1] ^= 0x10
		}
		fh := capture.FrameHeader{Src: rp.from, Dst: rp.to, VLANs: rp.vlans, TOS: 0x02}
		if err := w.WriteUDP(t0.Add(time.Duration(i)*time.Microsecond), fh, pkt); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// Section 6 with sections 5 and the C12 logical header: a capture written by the capture
// package from packets built by roce (IPv4, VLAN-tagged IPv4, IPv6; every header kind, pad,
// an extended ACK, a CNP) verifies in full; with one payload bit flipped, crem pcap verify
// names that frame and exits 1.
func TestPcapVerifyWrittenCaptureSection6(t *testing.T) {
	dir := t.TempDir()
	n := len(roceTraffic())
	good := filepath.Join(dir, "good.pcap")
	writeRoCECapture(t, good, -1)
	code, out, errOut := runPcapCLI(t, "pcap", "verify", "--each", good)
	want := "roce: " + strconv.Itoa(n) + " packets, " + strconv.Itoa(n) + " icrc ok, 0 icrc bad"
	if code != 0 || lastLine(out) != want || errOut != "" {
		t.Fatalf("exit %d, last line %q, err %q", code, lastLine(out), errOut)
	}
	for _, w := range []string{
		"frame 3: 10.1.0.1:49152 -> 10.1.0.2:4791 qp 0x000011 SEND_LAST psn 102 icrc ok",
		"frame 9: [2001:db8::1]:50000 -> [2001:db8::2]:4791 qp 0x000033 FETCH_ADD psn 7 icrc ok",
		"frame 13: 10.1.0.2:49153 -> 10.1.0.1:4791 qp 0x000022 ACKNOWLEDGE psn 101 icrc ok",
		"frame 14: 10.1.0.2:49153 -> 10.1.0.1:4791 qp 0x000022 CNP psn 0 icrc ok",
	} {
		if !strings.Contains(out, w+"\n") {
			t.Errorf("--each output lacks %q:\n%s", w, out)
		}
	}
	bad := filepath.Join(dir, "bad.pcap")
	writeRoCECapture(t, bad, 4)
	code, out, errOut = runPcapCLI(t, "pcap", "verify", bad)
	want = "roce: " + strconv.Itoa(n) + " packets, " + strconv.Itoa(n-1) + " icrc ok, 1 icrc bad"
	if code != 1 || out != want+"\n" || !strings.Contains(errOut, "frame 5:") || !strings.Contains(errOut, "icrc mismatch") {
		t.Fatalf("one corrupted packet: exit %d, out %q, err %q", code, out, errOut)
	}
}

// Section 6 (pcapng): the same written capture converted to pcapng by editcap verifies the
// same way (skipped without editcap, which comes with tshark).
func TestPcapVerifyPcapNGSection6(t *testing.T) {
	editcap, err := exec.LookPath("editcap")
	if err != nil {
		t.Skip("editcap is not installed (it comes with tshark); the pcapng check is skipped")
	}
	dir := t.TempDir()
	for _, corrupt := range []int{-1, 0} {
		src, ng := filepath.Join(dir, "w.pcap"), filepath.Join(dir, "w.pcapng")
		writeRoCECapture(t, src, corrupt)
		if out, err := exec.Command(editcap, "-F", "pcapng", src, ng).CombinedOutput(); err != nil {
			t.Fatalf("editcap: %v: %s", err, out)
		}
		n := len(roceTraffic())
		code, out, _ := runPcapCLI(t, "pcap", "verify", ng)
		wantBad := 0
		if corrupt >= 0 {
			wantBad = 1
		}
		want := "roce: " + strconv.Itoa(n) + " packets, " + strconv.Itoa(n-wantBad) + " icrc ok, " + strconv.Itoa(wantBad) + " icrc bad\n"
		if code != wantBad || out != want {
			t.Errorf("pcapng, corrupt %d: exit %d, out %q", corrupt, code, out)
		}
	}
}

// Sections 5 and 6 against an independent decoder: tshark decodes the written capture as
// InfiniBand (RoCEv2 on UDP 4791) with the opcodes, PSNs and QPs we built.
func TestTsharkDecodesWrittenCaptureSection5(t *testing.T) {
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install -y tshark); the independent-decoder check is skipped")
	}
	path := filepath.Join(t.TempDir(), "w.pcap")
	writeRoCECapture(t, path, -1)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-r", path, "-T", "fields", "-E", "separator=/t",
		"-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn",
		"-e", "infiniband.bth.destqp", "-e", "infiniband.bth.padcnt").Output()
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		t.Fatalf("tshark: %v: %s", err, ee.Stderr)
	} else if err != nil {
		t.Fatal(err)
	}
	traffic := roceTraffic()
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != len(traffic) {
		t.Fatalf("tshark printed %d frames, want %d:\n%s", len(lines), len(traffic), out)
	}
	for i, line := range lines {
		cols := strings.Split(line, "\t")
		p := traffic[i].p
		want := []uint64{uint64(i + 1), uint64(p.BTH.OpCode), uint64(p.BTH.PSN), uint64(p.BTH.DestQP), uint64(roce.PadLen(len(p.Payload)))}
		if len(cols) != len(want) {
			t.Fatalf("frame %d: tshark %q", i+1, line)
		}
		for j, w := range want {
			got, err := strconv.ParseUint(cols[j], 0, 64)
			if err != nil || got != w {
				t.Errorf("frame %d (%v) field %d: tshark %q, want %d", i+1, p.BTH.OpCode, j, cols[j], w)
			}
		}
	}
}

// C14: crem pcap stats has no default CREM port; without --crem-port it says so and exits 2,
// before opening anything.
func TestPcapStatsNeedsCREMPortC14(t *testing.T) {
	code, out, errOut := runPcapCLI(t, "pcap", "stats", "no-such-file.pcap")
	if code != 2 || out != "" || !strings.Contains(errOut, "--crem-port is required") || !strings.Contains(errOut, "C14") {
		t.Fatalf("exit %d, out %q, err %q", code, out, errOut)
	}
	for _, args := range [][]string{
		{"pcap", "stats", "--crem-port", "50000"},
		{"pcap", "stats", "--crem-port", "50000", "no-such-file.pcap"},
		{"pcap", "stats", "--crem-port", "4791", "x.pcap"},
		{"pcap", "stats", "--crem-port", "70000", "x.pcap"},
	} {
		if code, _, errOut := runPcapCLI(t, args...); code != 2 || errOut == "" {
			t.Errorf("%v: exit %d, err %q", args, code, errOut)
		}
	}
	code, _, errOut = runPcapCLI(t, "pcap", "stats", "--help")
	for _, f := range []string{"restored_estimate", "coded_retx", "missing_psns", "extended_acks", "--crem-port", "estimate"} {
		if code != 0 || !strings.Contains(errOut, f) {
			t.Errorf("--help (exit %d) does not name %s", code, f)
		}
	}
}

// Section 6: on the real RoCEv2 capture every packet is found on port 4791 and its ICRC is good;
// the table says so, and there is no CREM traffic.
func TestPcapStatsRealCaptureSection6(t *testing.T) {
	path := pcapRealCapture(t)
	code, out, errOut := runPcapCLI(t, "pcap", "stats", path, "--crem-port", "50000", "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, err %q", code, errOut)
	}
	var s struct {
		CREM struct {
			Messages struct {
				Total int `json:"total"`
			} `json:"messages"`
		} `json:"crem"`
		RoCE struct {
			Packets int `json:"packets"`
			ICRCOK  int `json:"icrc_ok"`
			ICRCBad int `json:"icrc_bad"`
		} `json:"roce"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	if s.RoCE.Packets != 105 || s.RoCE.ICRCOK != 105 || s.RoCE.ICRCBad != 0 || s.CREM.Messages.Total != 0 {
		t.Fatalf("%+v", s)
	}
	code, out, _ = runPcapCLI(t, "pcap", "stats", "--crem-port", "50000", path)
	if code != 0 || !strings.Contains(out, "roce (port 4791): 105 packets") || !strings.Contains(out, "crem (port 50000): 0 messages") {
		t.Fatalf("exit %d, table:\n%s", code, out)
	}
}

// A lab capture (crem+tcaeth over a lossy path) through the command: the table names every
// section, --json carries the documented fields, and the figures agree with the lab's (coded
// retransmissions at most the CSFs', frames marked dropped exactly the path's losses).
func TestPcapStatsLabCaptureJSONAndTable(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the lab on loopback")
	}
	loss, err := netem.ParseLossSpec("0.05")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "lab.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	res, err := lab.Lab(context.Background(), lab.Options{RTT: 2 * time.Millisecond, Loss: loss, Rate: 100e6, Messages: 2,
		Size: 256 << 10, QPs: 2, Seed: 3, Runs: []string{"crem+tcaeth"}, Pcap: f, Timeout: 30 * time.Second, RetryCount: 30})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil || !res.Verified() {
		t.Fatalf("%v %+v", err, res)
	}
	port := strconv.Itoa(res.CREMPort)
	code, out, errOut := runPcapCLI(t, "pcap", "stats", path, "--crem-port", port, "--roce-port", "0", "--json")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, err %q", code, errOut)
	}
	var raw map[string]map[string]any
	if err := json.Unmarshal([]byte(out), &raw); err != nil {
		t.Fatal(err)
	}
	for section, fields := range map[string][]string{
		"frames": {"total", "udp", "not_udp", "fragments", "cut", "undecodable", "other_udp", "dropped"},
		"crem": {"port", "messages", "repair", "blocks", "repair_requests", "loss_reports", "path_reports", "closes", "hellos",
			"restored_estimate", "flows", "flows_untracked", "blocks_untracked"},
		"roce": {"port", "packets", "data_packets", "retransmissions", "read_requests", "read_responses", "atomics", "acks",
			"naks", "nak_sequence", "rnr_naks", "extended_acks", "cnps", "malformed", "icrc_ok", "icrc_bad", "icrc_unchecked",
			"dropped", "missing_psns", "qps", "qps_untracked", "psns_untracked", "no_bth"},
	} {
		for _, k := range fields {
			if _, ok := raw[section][k]; !ok {
				t.Errorf("--json: %s.%s missing", section, k)
			}
		}
	}
	var s struct {
		Frames struct {
			Dropped uint64 `json:"dropped"`
		} `json:"frames"`
		CREM struct {
			Repair struct {
				CodedRetx uint64 `json:"coded_retx"`
				Ordinary  uint64 `json:"ordinary"`
			} `json:"repair"`
			Flows []struct {
				FlowID uint32 `json:"flow_id"`
				Hello  *struct {
					DestQP uint32 `json:"dest_qp"`
				} `json:"hello"`
			} `json:"flows"`
		} `json:"crem"`
		RoCE struct {
			Packets uint64 `json:"packets"`
		} `json:"roce"`
	}
	if err := json.Unmarshal([]byte(out), &s); err != nil {
		t.Fatal(err)
	}
	r := res.Runs[0]
	if s.Frames.Dropped != r.Lost || s.CREM.Repair.CodedRetx > r.CodedRetx || s.CREM.Repair.Ordinary == 0 || s.RoCE.Packets == 0 ||
		len(s.CREM.Flows) == 0 || s.CREM.Flows[0].Hello == nil {
		t.Errorf("capture %+v, lab %+v", s, r)
	}
	code, out, _ = runPcapCLI(t, "pcap", "stats", "--crem-port", port, "--roce-port", "0", path)
	for _, want := range []string{"frames: ", "crem (port " + port + "): ", "REPAIR ", "coded retransmission", "restored (estimate)",
		"FLOW ID", "roce (port any): ", "DEST QP", "total"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("table (exit %d) lacks %q:\n%s", code, want, out)
		}
	}
	// Cut short: the summary of what was read, and exit 2.
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := filepath.Join(t.TempDir(), "cut.pcap")
	if err := os.WriteFile(cut, b[:len(b)-7], 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, errOut = runPcapCLI(t, "pcap", "stats", "--crem-port", port, cut)
	if code != 2 || !strings.Contains(out, "frames: ") || errOut == "" {
		t.Errorf("cut file: exit %d, err %q", code, errOut)
	}
}
