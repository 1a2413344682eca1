package dissector

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/harness/lab"
	"github.com/crem-project/crem/internal/harness/perf"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/rc"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// tcaethFields are the fields the T/C AETH comparison reads, after frame.number.
var tcaethFields = []string{"tcaeth.segment_num", "tcaeth.last_finished_psn", "tcaeth.seg_left", "tcaeth.seg_right",
	"tcaeth.lost_first", "tcaeth.lost_last", "tcaeth.lost_count", "tcaeth.lost_total", "tcaeth.malformed",
	"crem.type", "crem.malformed"}

// tsharkRows runs tshark with crem.lua on file and returns, per frame number, the fields' values
// (repeated occurrences joined by commas).
func tsharkRows(t *testing.T, tshark, file string, opts []string, fields []string) map[int][]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	args := append([]string{"-X", "lua_script:crem.lua", "-r", file}, opts...)
	args = append(args, "-T", "fields", "-E", "separator=|", "-E", "occurrence=a", "-E", "aggregator=,", "-e", "frame.number")
	for _, f := range fields {
		args = append(args, "-e", f)
	}
	// A Lua error in the script shows as expert info, in the last column.
	args = append(args, "-e", "_ws.expert.message")
	cmd := exec.CommandContext(ctx, tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", args, err, stderr.Bytes())
	}
	if strings.Contains(stderr.String(), "Lua") || strings.Contains(string(out), "Lua Error") {
		t.Fatalf("tshark reports a Lua problem:\n%s", stderr.Bytes())
	}
	rows := map[int][]string{}
	for line := range strings.Lines(string(out)) {
		cols := strings.Split(strings.TrimRight(line, "\r\n"), "|")
		n, err := strconv.Atoi(cols[0])
		if err != nil {
			t.Fatalf("tshark line %q: %v", line, err)
		}
		if len(cols) != len(fields)+2 {
			t.Fatalf("tshark line %q: %d columns, want %d", line, len(cols), len(fields)+2)
		}
		if strings.Contains(cols[len(cols)-1], "Lua Error") {
			t.Fatalf("frame %d: %s", n, cols[len(cols)-1])
		}
		rows[n] = cols[1 : len(cols)-1]
	}
	return rows
}

// sent is what the project's own decoders find in a capture: the T/C AETH of every extended ACK
// and the type of every CREM message, by frame number, and the ports the RoCEv2 datagrams are
// addressed to.
type sent struct {
	acks   map[int]roce.TCAETH
	psns   map[int]psn.PSN // the BTH PSN of each extended ACK
	crem   map[int]wire.Type
	ports  map[uint16]bool
	frames int
}

// decodeCapture reads a capture with package capture, roce and wire: a datagram to the CREM
// port is CREM (wire.Parse), any other RoCEv2 (roce.ParsePacket). Either must parse.
func decodeCapture(t *testing.T, data []byte, cremPort int) sent {
	t.Helper()
	r, err := capture.NewReader(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	s := sent{acks: map[int]roce.TCAETH{}, psns: map[int]psn.PSN{}, crem: map[int]wire.Type{}, ports: map[uint16]bool{}}
	for {
		fr, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		s.frames++
		d, err := capture.DecodeUDP(fr.LinkType, fr.Data)
		if err != nil {
			t.Fatalf("frame %d: %v", fr.Number, err)
		}
		if cremPort != 0 && int(d.Dst.Port()) == cremPort {
			m, err := wire.Parse(d.Payload)
			if err != nil {
				t.Fatalf("frame %d: CREM: %v", fr.Number, err)
			}
			s.crem[fr.Number] = m.Type()
			continue
		}
		p, err := roce.ParsePacket(d.Payload)
		if err != nil {
			t.Fatalf("frame %d: RoCEv2: %v", fr.Number, err)
		}
		s.ports[d.Dst.Port()] = true
		if p.Has(roce.HasTCAETH) {
			s.acks[fr.Number] = p.TCAETH
			s.psns[fr.Number] = p.BTH.PSN
		}
	}
	return s
}

// gapsOf computes, from the project's decoded T/C AETH, the lost ranges the draft's rule implies
// (Section 4, Case 2): the PSNs strictly between consecutive reported blocks.
func gapsOf(tc roce.TCAETH) (first, last, count []string, total uint32) {
	prev := tc.LastFinished
	for _, s := range tc.Used() {
		if n := prev.Forward(s.Left) - 1; n > 0 {
			first = append(first, strconv.Itoa(int(prev.Add(1))))
			last = append(last, strconv.Itoa(int(s.Left.Add(psn.Mask))))
			count = append(count, strconv.Itoa(int(n)))
			total += n
		}
		prev = s.Right
	}
	return first, last, count, total
}

// compareTCAETH checks, packet by packet, that tshark finds a T/C AETH in exactly the frames
// the project's decoder does, with the same fields and the same lost ranges; it returns how many
// carried at least one Seg field.
func compareTCAETH(t *testing.T, rows map[int][]string, s sent) int {
	t.Helper()
	col := func(row []string, name string) string { return row[slices.Index(tcaethFields, name)] }
	withSegs := 0
	for n, row := range rows {
		if _, ok := s.acks[n]; !ok && col(row, "tcaeth.segment_num") != "" {
			t.Errorf("frame %d: tshark finds a T/C AETH the project's decoder does not", n)
		}
		if m := col(row, "tcaeth.malformed") + col(row, "crem.malformed"); m != "" {
			t.Errorf("frame %d: the project's own traffic marked malformed: %s", n, m)
		}
	}
	for n, tc := range s.acks {
		row, ok := rows[n]
		if !ok || col(row, "tcaeth.segment_num") == "" {
			t.Errorf("frame %d: extended ACK without a tcaeth tree", n)
			continue
		}
		var left, right []string
		for _, seg := range tc.Used() {
			left = append(left, strconv.Itoa(int(seg.Left)))
			right = append(right, strconv.Itoa(int(seg.Right)))
		}
		first, last, count, total := gapsOf(tc)
		want := map[string]string{
			"tcaeth.segment_num":       strconv.Itoa(int(tc.SegmentNum())),
			"tcaeth.last_finished_psn": strconv.Itoa(int(tc.LastFinished)),
			"tcaeth.seg_left":          strings.Join(left, ","),
			"tcaeth.seg_right":         strings.Join(right, ","),
			"tcaeth.lost_first":        strings.Join(first, ","),
			"tcaeth.lost_last":         strings.Join(last, ","),
			"tcaeth.lost_count":        strings.Join(count, ","),
			"tcaeth.lost_total":        strconv.Itoa(int(total)),
		}
		for f, w := range want {
			if got := col(row, f); got != w {
				t.Errorf("frame %d %s: tshark %q, project %q", n, f, got, w)
			}
		}
		if tc.NumSegs > 0 {
			withSegs++
		}
	}
	return withSegs
}

// decodeAs returns tshark options that decode the RoCEv2 datagrams' destination ports as
// InfiniBand (4791 is so already).
func decodeAs(ports map[uint16]bool) []string {
	var o []string
	for p := range ports {
		if p != roce.UDPPort {
			o = append(o, "-d", fmt.Sprintf("udp.port==%d,infiniband", p))
		}
	}
	return o
}

func writeFile(t *testing.T, name string, b []byte) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestTCAETHDissectorLabRULINGST1: the lab's crem+tcaeth run with loss, captured as `crem lab
// --pcap` does (lab.Options.Pcap). tshark, with crem.lua, the CREM port and the RoCEv2 ports,
// decodes the T/C AETH of every extended ACK as the project's own decoder reads the same frames
// (RULINGS T1-T3), and every CREM message as package wire does, none of it malformed.
func TestTCAETHDissectorLabRULINGST1(t *testing.T) {
	tshark := testenv.Tshark(t)
	loss, err := netem.ParseLossSpec("bernoulli:0.02")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := lab.Lab(ctx, lab.Options{Runs: []string{"crem+tcaeth"}, Messages: 4, Size: 256 << 10, RTT: 2 * time.Millisecond,
		Loss: loss, QPs: 1, Seed: 3, Pcap: &buf, RetryCount: 100}) // patient QPs: a busy machine stalls the lab
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified() {
		t.Fatalf("lab run did not verify: %+v", res.Runs)
	}
	s := decodeCapture(t, buf.Bytes(), res.CREMPort)
	file := writeFile(t, "lab.pcap", buf.Bytes())
	opts := append([]string{"-o", fmt.Sprintf("crem.port:%d", res.CREMPort)}, decodeAs(s.ports)...)
	rows := tsharkRows(t, tshark, file, opts, tcaethFields)
	if len(rows) != s.frames {
		t.Fatalf("tshark printed %d frames, the capture has %d", len(rows), s.frames)
	}
	withSegs := compareTCAETH(t, rows, s)
	if len(s.acks) == 0 || withSegs == 0 {
		t.Fatalf("%d extended ACKs, %d with Seg fields: the run's loss should have made both", len(s.acks), withSegs)
	}
	if len(s.crem) == 0 {
		t.Fatal("no CREM message in a crem+tcaeth run")
	}
	for n, typ := range s.crem {
		if got := rows[n][slices.Index(tcaethFields, "crem.type")]; got != strconv.Itoa(int(typ)) {
			t.Errorf("frame %d: tshark crem.type %q, package wire %v", n, got, typ)
		}
	}
	t.Logf("%d frames: %d extended ACKs (%d with segments), %d CREM messages", s.frames, len(s.acks), withSegs, len(s.crem))
}

// TestTCAETHDissectorPerfRULINGST1: `crem perf --mode tcaeth --pcap` over loopback with loss
// (perf.Loopback with Options.Pcap, which frames every packet on UDP port 4791): tshark's
// tcaeth fields agree with the project's decoder on every extended ACK.
func TestTCAETHDissectorPerfRULINGST1(t *testing.T) {
	tshark := testenv.Tshark(t)
	loss, err := netem.ParseLossSpec("bernoulli:0.03")
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	res, err := perf.Loopback(ctx, perf.Options{Op: "write", Size: 256 << 10, Iters: 8, MTU: 1024, Mode: rc.ModeTCAETH,
		Rate: 400e6, Loss: loss, Delay: time.Millisecond, Seed: 5, Pcap: &buf, RetryCount: 100})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Verified {
		t.Fatalf("perf run did not verify: %+v", res)
	}
	s := decodeCapture(t, buf.Bytes(), 0)
	if !s.ports[roce.UDPPort] || len(s.ports) != 1 {
		t.Fatalf("perf capture's RoCEv2 ports %v, want only %d", s.ports, roce.UDPPort)
	}
	file := writeFile(t, "perf.pcap", buf.Bytes())
	rows := tsharkRows(t, tshark, file, nil, tcaethFields)
	if len(rows) != s.frames {
		t.Fatalf("tshark printed %d frames, the capture has %d", len(rows), s.frames)
	}
	withSegs := compareTCAETH(t, rows, s)
	if len(s.acks) == 0 || withSegs == 0 {
		t.Fatalf("%d extended ACKs, %d with Seg fields: the run's loss should have made both", len(s.acks), withSegs)
	}
	t.Logf("%d frames: %d extended ACKs (%d with segments)", s.frames, len(s.acks), withSegs)
}
