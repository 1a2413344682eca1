package roce

import (
	"context"
	"math/bits"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tsharkFields runs tshark on a capture and returns, per frame number, the named InfiniBand
// fields of every frame it decodes as InfiniBand. It skips the test when tshark is missing.
func tsharkFields(t *testing.T, path string, fields ...string) map[int][]string {
	t.Helper()
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install -y tshark); the independent-decoder check is skipped")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	// Source port 69 makes tshark take some frames for TFTP unless that dissector is off.
	args := []string{"-r", path, "--disable-protocol", "tftp", "-Y", "infiniband", "-T", "fields",
		"-E", "separator=/t", "-e", "frame.number"}
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	out, err := exec.CommandContext(ctx, bin, args...).Output()
	if err != nil {
		t.Fatalf("tshark %v: %v", args, err)
	}
	rows := map[int][]string{}
	for line := range strings.Lines(string(out)) {
		cols := strings.Split(strings.TrimRight(line, "\r\n"), "\t")
		n, err := strconv.Atoi(cols[0])
		if err != nil {
			t.Fatalf("tshark line %q: %v", line, err)
		}
		rows[n] = cols[1:]
	}
	return rows
}

// num parses a tshark number (decimal or 0x-hex), or a boolean as 0/1.
func num(t *testing.T, s string) uint64 {
	t.Helper()
	if v, err := strconv.ParseUint(s, 0, 64); err == nil {
		return v
	}
	if b, err := strconv.ParseBool(s); err == nil {
		if b {
			return 1
		}
		return 0
	}
	t.Fatalf("tshark value %q is not a number", s)
	return 0
}

// Section 5, against an independent decoder: tshark's InfiniBand dissector finds the same 105
// packets in the real capture, with the same opcode, PSN, destination QP, pad count, AckReq,
// AETH syndrome and MSN, and the same ICRC octets.
func TestTsharkAgreesOnCaptureSection5(t *testing.T) {
	path := realCapture(t)
	rows := tsharkFields(t, path, "infiniband.bth.opcode", "infiniband.bth.psn", "infiniband.bth.destqp",
		"infiniband.bth.padcnt", "infiniband.bth.a", "infiniband.aeth.syndrome", "infiniband.aeth.msn",
		"infiniband.invariant.crc")
	pkts := readRoCE(t, path)
	if len(rows) != len(pkts) || len(pkts) != capturePackets {
		t.Fatalf("tshark decodes %d InfiniBand frames, we find %d, want %d", len(rows), len(pkts), capturePackets)
	}
	for _, rp := range pkts {
		row, ok := rows[rp.frame]
		if !ok {
			t.Fatalf("frame %d: tshark does not decode it as InfiniBand", rp.frame)
		}
		p, err := ParsePacket(rp.pkt)
		if err != nil {
			t.Fatalf("frame %d: %v", rp.frame, err)
		}
		ack := uint64(0)
		if p.BTH.AckReq {
			ack = 1
		}
		want := []uint64{uint64(p.BTH.OpCode), uint64(p.BTH.PSN), uint64(p.BTH.DestQP),
			uint64(p.BTH.PadCount), ack}
		for i, w := range want {
			if got := num(t, row[i]); got != w {
				t.Errorf("frame %d field %d: tshark %d, we %d", rp.frame, i, got, w)
			}
		}
		if p.Has(HasAETH) {
			if num(t, row[5]) != uint64(p.AETH.Syndrome) || num(t, row[6]) != uint64(p.AETH.MSN) {
				t.Errorf("frame %d: tshark AETH %s/%s, we %v", rp.frame, row[5], row[6], p.AETH)
			}
		} else if row[5] != "" {
			t.Errorf("frame %d: tshark sees an AETH we do not", rp.frame)
		}
		// tshark shows the ICRC octets as a big-endian number; we keep the CRC value, which
		// travels least significant octet first.
		if got := num(t, row[7]); got != uint64(bits.ReverseBytes32(p.ICRC)) {
			t.Errorf("frame %d: tshark ICRC %#08x, we carry %#08x", rp.frame, got, p.ICRC)
		}
	}
}
