package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/rc/perf"
	"github.com/crem-project/crem/roce"
)

func runPerfCLI(args ...string) (code int, out, errOut string) {
	var o, e bytes.Buffer
	code = run(append([]string{"perf"}, args...), stdio{in: strings.NewReader(""), out: &o, err: &e})
	return code, o.String(), e.String()
}

// crem perf --json prints one JSON object with the contract's fields, and exits 0 when every
// message completed and was verified; the pcap it writes holds every packet, each ICRC good
// under the flow's logical header, and tshark decodes them as InfiniBand with our opcodes,
// PSNs and QPs.
func TestPerfLoopbackJSONAndPcap(t *testing.T) {
	pcap := filepath.Join(t.TempDir(), "perf.pcap")
	code, out, errOut := runPerfCLI("write", "--loopback", "--size", "64KiB", "--iters", "3", "--mtu", "1024",
		"--rate", "1Gbit", "--loss", "0.02", "--delay", "1ms", "--mode", "tcaeth", "--seed", "3", "--json", "--pcap", pcap)
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var res map[string]any
	dec := json.NewDecoder(strings.NewReader(out))
	if err := dec.Decode(&res); err != nil {
		t.Fatalf("not JSON: %q: %v", out, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		t.Fatalf("more than one JSON object on standard output: %q", out)
	}
	for _, k := range []string{"bytes", "iterations", "seconds", "verified", "data_packets", "retransmitted_packets",
		"timeout_retransmissions", "ack_packets", "nak_packets", "dropped_packets", "dropped_data_packets", "mode"} {
		if _, ok := res[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	if res["bytes"].(float64) != 3*65536 || res["iterations"].(float64) != 3 || res["verified"] != true ||
		res["mode"] != "tcaeth" || res["data_packets"].(float64) < 192 {
		t.Errorf("result %v", res)
	}
	pkts := readPerfPcap(t, pcap)
	sent := res["data_packets"].(float64) + res["retransmitted_packets"].(float64) + res["ack_packets"].(float64) + res["nak_packets"].(float64)
	// The server reports its counters when the client is done, and its QP stays for the
	// client's last retransmissions: the capture may end with the idle-tail ACK repeats of
	// protocol notes R20 (at most two), sent after the report. Everything counted is captured.
	extra := len(pkts) - int(sent)
	if extra < 0 || extra > 2 {
		t.Errorf("pcap holds %d packets, the counters say %v were sent", len(pkts), sent)
	}
	for _, k := range pkts[len(pkts)-max(extra, 0):] {
		if k.p.BTH.OpCode != roce.OpAcknowledge {
			t.Errorf("frame %d after the server's report is %v, not an ACK repeat", k.frame, k.p.BTH.OpCode)
		}
	}
	checkTshark(t, pcap, pkts)
}

type pcapPkt struct {
	frame int
	p     roce.Packet
}

// readPerfPcap reads every RoCEv2 packet of the capture and checks its ICRC.
func readPerfPcap(t *testing.T, path string) []pcapPkt {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	var out []pcapPkt
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		d, err := capture.DecodeUDP(fr.LinkType, fr.Data)
		if err != nil || d.Dst.Port() != roce.UDPPort {
			t.Fatalf("frame %d: not RoCEv2: %v", fr.Number, err)
		}
		if err := roce.VerifyICRC(d.IPHeader, d.UDPHeader, d.Payload); err != nil {
			t.Fatalf("frame %d: %v", fr.Number, err)
		}
		p, err := roce.ParsePacket(append([]byte(nil), d.Payload...))
		if err != nil {
			t.Fatalf("frame %d: %v", fr.Number, err)
		}
		out = append(out, pcapPkt{fr.Number, p})
	}
}

func checkTshark(t *testing.T, path string, pkts []pcapPkt) {
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install -y tshark); the independent-decoder check is skipped")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-r", path, "-Y", "infiniband", "-T", "fields", "-E", "separator=/t",
		"-e", "frame.number", "-e", "infiniband.bth.opcode", "-e", "infiniband.bth.psn", "-e", "infiniband.bth.destqp").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	rows := map[int][]string{}
	for line := range strings.Lines(string(out)) {
		cols := strings.Split(strings.TrimRight(line, "\r\n"), "\t")
		n, _ := strconv.Atoi(cols[0])
		rows[n] = cols[1:]
	}
	if len(rows) != len(pkts) {
		t.Fatalf("tshark decodes %d frames as InfiniBand, the capture holds %d", len(rows), len(pkts))
	}
	ops := map[roce.Opcode]int{}
	for _, k := range pkts {
		row := rows[k.frame]
		want := []uint64{uint64(k.p.BTH.OpCode), uint64(k.p.BTH.PSN), uint64(k.p.BTH.DestQP)}
		for i, w := range want {
			if got, err := strconv.ParseUint(row[i], 0, 64); err != nil || got != w {
				t.Fatalf("frame %d field %d: tshark %q, we %d", k.frame, i, row[i], w)
			}
		}
		ops[k.p.BTH.OpCode]++
	}
	for _, op := range []roce.Opcode{roce.OpWriteFirst, roce.OpWriteMiddle, roce.OpWriteLast, roce.OpAcknowledge} {
		if ops[op] == 0 {
			t.Errorf("no %v in the capture (%v)", op, ops)
		}
	}
}

// Every operation in every mode through the CLI on loopback: exit 0 and verified.
func TestPerfLoopbackOpsAndModes(t *testing.T) {
	for _, op := range []string{"write", "send", "read"} {
		for _, mode := range []string{"gbn", "sr", "tcaeth"} {
			code, out, errOut := runPerfCLI(op, "--loopback", "--size", "100000", "--iters", "2", "--mode", mode,
				"--loss", "0.01", "--delay", "1ms", "--json")
			if code != 0 || !strings.Contains(out, `"verified":true`) {
				t.Errorf("%s %s: exit %d: %s %s", op, mode, code, out, errOut)
			}
		}
	}
	code, out, _ := runPerfCLI("send", "--loopback", "--size", "5000", "--iters", "2", "--mode", "sr", "--sr-nak=false")
	if code != 0 || !strings.Contains(out, "verified") || !strings.Contains(out, "true") {
		t.Errorf("sr without NAKs: exit %d: %s", code, out)
	}
}

// Usage errors exit 2; a server that never answers is a failed run, exit 1.
func TestPerfUsageAndFailure(t *testing.T) {
	for _, args := range [][]string{
		{},
		{"bogus"},
		{"write"},
		{"write", "--loopback", "--server", "127.0.0.1:1"},
		{"write", "--loopback", "--mtu", "1000"},
		{"write", "--loopback", "--mode", "fast"},
		{"write", "--loopback", "--size", "lots"},
		{"write", "--loopback", "--loss", "2"},
		{"write", "--loopback", "--retry-count", "0"},
		{"serve"},
	} {
		if code, _, _ := runPerfCLI(args...); code != 2 {
			t.Errorf("%q: exit %d, want 2", args, code)
		}
	}
	if code, _, errOut := runPerfCLI("--help"); code != 0 || !strings.Contains(errOut, "perftest") {
		t.Errorf("--help: exit %d", code)
	}
	// On a path that loses everything the sending QP gives up after --retry-count timeouts
	// without progress (T7), each resending the message's four packets.
	for _, n := range []int{2, 5} {
		code, out, _ := runPerfCLI("write", "--loopback", "--loss", "1", "--retry-count", strconv.Itoa(n), "--iters", "1",
			"--size", "4KiB", "--mtu", "1024", "--timeout", "10s", "--json")
		var res struct {
			Timeouts uint64 `json:"timeout_retransmissions"`
			Error    string `json:"error"`
		}
		if code != 1 || json.Unmarshal([]byte(out), &res) != nil || !strings.Contains(res.Error, "retry exceeded") || res.Timeouts != uint64(4*n) {
			t.Errorf("--retry-count %d on a dead path: exit %d, %s", n, code, out)
		}
	}
	code, out, _ := runPerfCLI("write", "--server", "127.0.0.1:9", "--port", "0", "--iters", "1", "--size", "1KiB",
		"--timeout", "2s", "--json")
	if code != 1 || !strings.Contains(out, `"verified":false`) {
		t.Errorf("unanswered server: exit %d, %s", code, out)
	}
}

// crem perf --qps N (perftest's -q): the JSON keeps every field of one QP, summed over the QPs,
// and adds qps and per_qp, one object per QP with its figures, QPNs and initial PSN, each
// verified; the PSNs follow from --seed. The table has a row per QP above the total. --qps
// outside 1..256 is a usage error.
func TestPerfQPsJSONAndTable(t *testing.T) {
	code, out, errOut := runPerfCLI("read", "--loopback", "--qps", "3", "--size", "32KiB", "--iters", "4", "--loss", "0.02",
		"--delay", "1ms", "--seed", "21", "--json")
	if code != 0 {
		t.Fatalf("exit %d: %s %s", code, out, errOut)
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("not one JSON object: %q: %v", out, err)
	}
	for _, k := range []string{"bytes", "iterations", "seconds", "verified", "data_packets", "retransmitted_packets",
		"timeout_retransmissions", "ack_packets", "nak_packets", "dropped_packets", "dropped_data_packets", "mode", "qps", "per_qp"} {
		if _, ok := res[k]; !ok {
			t.Errorf("JSON lacks %q", k)
		}
	}
	per, _ := res["per_qp"].([]any)
	if res["qps"] != 3.0 || len(per) != 3 || res["verified"] != true || res["bytes"] != 3*4*32768.0 || res["iterations"] != 12.0 {
		t.Fatalf("result %v", res)
	}
	var data float64
	psns := map[float64]bool{}
	for i, x := range per {
		q := x.(map[string]any)
		for _, k := range []string{"qp", "local_qpn", "remote_qpn", "initial_psn", "next_psn", "wrapped", "iterations", "completed",
			"bytes", "seconds", "gbit_per_second", "verified", "data_packets", "retransmitted_packets", "ack_packets", "dropped_packets"} {
			if _, ok := q[k]; !ok {
				t.Errorf("QP %d lacks %q", i, k)
			}
		}
		if q["qp"] != float64(i) || q["verified"] != true || q["completed"] != 4.0 || q["initial_psn"] != float64(perf.InitialPSN(21, i)) {
			t.Errorf("QP %d: %v", i, q)
		}
		data += q["data_packets"].(float64)
		psns[q["initial_psn"].(float64)] = true
	}
	if data != res["data_packets"] || len(psns) != 3 {
		t.Errorf("data packets %v, the QPs' sum %v; initial PSNs %v", res["data_packets"], data, psns)
	}

	code, out, errOut = runPerfCLI("write", "--loopback", "--qps", "2", "--size", "16KiB", "--iters", "3", "--seed", "21")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if code != 0 || len(lines) != 6 || !strings.HasPrefix(lines[0], "#qp") || !strings.HasPrefix(lines[1], "0 ") ||
		!strings.HasPrefix(lines[2], "1 ") || !strings.HasPrefix(lines[4], "#bytes") || !strings.HasSuffix(lines[5], "true") {
		t.Fatalf("exit %d: table %q %s", code, out, errOut)
	}
	if !strings.Contains(lines[1], fmt.Sprintf("%#x", uint32(perf.InitialPSN(21, 0)))) {
		t.Errorf("QP 0's row %q lacks its initial PSN %#x", lines[1], uint32(perf.InitialPSN(21, 0)))
	}
	code, out, _ = runPerfCLI("write", "--loopback", "--size", "16KiB", "--iters", "3")
	if code != 0 || strings.Contains(out, "#qp") || !strings.HasPrefix(out, "#bytes") {
		t.Errorf("one QP: exit %d, table %q, want the table of one QP as before", code, out)
	}
	for _, n := range []string{"0", "257", "-1"} {
		if code, _, _ := runPerfCLI("write", "--loopback", "--qps", n); code != 2 {
			t.Errorf("--qps %s: exit %d, want 2", n, code)
		}
	}
}
