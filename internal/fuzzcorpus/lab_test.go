package fuzzcorpus_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/fuzzcorpus"
	"github.com/crem-project/crem/internal/harness/lab"
	"github.com/crem-project/crem/netem"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

var (
	updateCorpus = flag.Bool("update-corpus", false,
		"run the lab and write the fuzz corpora of real traffic under testdata/fuzz of the parsers' packages")
	corpusOnly = flag.String("corpus-only", "", "with -update-corpus: only the targets (package/FuzzName) this regexp matches")
)

// labPrefix names the corpus files this generator writes, so that it replaces its own and never
// touches the crashers go test wrote (named by their hash alone).
const labPrefix = "lab-"

// TestWriteFuzzCorpus runs the lab (two gateways in relay mode between an RDMA requester and
// responder on loopback, 5 percent loss: WRITE, READ and SEND, go-back-N and T/C AETH) with the
// impaired path captured, and writes tens of its datagrams as corpus files of the fuzz targets
// that parse them: the CREM parsers, the RoCEv2 parsers, the capture decoder and reader, the
// CSF's operation sequences, the RDMA responder and the pairing learner. Run by hand:
//
//	go test ./internal/fuzzcorpus -run TestWriteFuzzCorpus -args -update-corpus
//	go test ./internal/fuzzcorpus -run TestWriteFuzzCorpus -args -update-corpus -corpus-only '^csf/'
func TestWriteFuzzCorpus(t *testing.T) {
	if !*updateCorpus {
		t.Skip("writes the fuzz corpora from lab traffic only with -update-corpus")
	}
	var ds []fuzzcorpus.Datagram
	for _, op := range []string{"write", "read", "send"} {
		loss, _ := netem.ParseLossSpec("0.05")
		var buf bytes.Buffer
		res, err := lab.Lab(context.Background(), lab.Options{RTT: 2 * time.Millisecond, Loss: loss, Rate: 100e6,
			Messages: 2, Size: 64 << 10, MTU: 1024, QPs: 2, Op: op, Seed: 11, Runs: []string{"crem+gbn", "crem+tcaeth"},
			Pcap: &buf, Timeout: 30 * time.Second})
		if err != nil || !res.Verified() {
			t.Fatalf("lab %s: %v %+v", op, err, res)
		}
		got, err := fuzzcorpus.Read(&buf)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("lab %s: %d datagrams, CREM port %d", op, len(got), res.CREMPort)
		ds = append(ds, got...)
	}
	// On loopback the RDMA hosts use ports of their own and the gateways relay from their CREM
	// sockets, so the kind is told by content: a CREM header whose Length is the datagram's
	// (a RoCEv2 packet has its P_Key, 0xffff, there), else a RoCEv2 packet.
	var crem, rdma []fuzzcorpus.Datagram
	for _, d := range ds {
		if _, err := wire.ParseHeader(d.Payload); err == nil {
			crem = append(crem, d)
		} else if _, err := roce.ParsePacket(d.Payload); err == nil {
			rdma = append(rdma, d)
		}
	}
	root := filepath.Join("..", "..")
	w := &corpusWriter{t: t, root: root, written: map[string]int{}}
	if *corpusOnly != "" {
		w.only = regexp.MustCompile(*corpusOnly)
	}
	w.wire(crem)
	w.roce(rdma)
	w.capture(ds)
	w.csf(ds)
	w.rc(rdma)
	w.pairing(rdma)
	names := make([]string, 0, len(w.written))
	for n := range w.written {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("%-45s %d files", n, w.written[n])
	}
}

type corpusWriter struct {
	t       *testing.T
	root    string
	written map[string]int
	cleared map[string]bool
	only    *regexp.Regexp
}

// put writes one corpus file for target (package/FuzzName), replacing the generator's earlier
// files of that target the first time.
func (w *corpusWriter) put(target string, values ...any) {
	if w.only != nil && !w.only.MatchString(target) {
		return
	}
	pkg, name, _ := strings.Cut(target, "/")
	dir := filepath.Join(w.root, pkg, "testdata", "fuzz", name)
	if w.cleared == nil {
		w.cleared = map[string]bool{}
	}
	if !w.cleared[dir] {
		old, _ := filepath.Glob(filepath.Join(dir, labPrefix+"*"))
		for _, f := range old {
			if err := os.Remove(f); err != nil {
				w.t.Fatal(err)
			}
		}
		w.cleared[dir] = true
	}
	b, err := fuzzcorpus.Encode(values...)
	if err != nil {
		w.t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		w.t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("%s%x", labPrefix, hash(b)))
	if err := os.WriteFile(path, b, 0o644); err != nil {
		w.t.Fatal(err)
	}
	w.written[target]++
}

func hash(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return h
}

// pick keeps at most per inputs of each kind and max in all, in the order given.
type pick struct {
	per, max int
	seen     map[string]int
	n        int
}

func (p *pick) take(kind string) bool {
	if p.seen == nil {
		p.seen = map[string]int{}
	}
	if p.n >= p.max || p.seen[kind] >= p.per {
		return false
	}
	p.seen[kind]++
	p.n++
	return true
}

var wireTargets = map[wire.Type]string{
	wire.TypeRepair: "FuzzRepair", wire.TypeHello: "FuzzHello", wire.TypeHelloAck: "FuzzHelloAck",
	wire.TypeParamUpdate: "FuzzParamUpdate", wire.TypeParamAck: "FuzzParamAck",
	wire.TypeRepairRequest: "FuzzRepairRequest", wire.TypeLossReport: "FuzzLossReport",
	wire.TypePathReport: "FuzzPathReport", wire.TypeClose: "FuzzClose",
}

// wire: every CREM message type the lab sent, with each of its flags combinations.
func (w *corpusWriter) wire(crem []fuzzcorpus.Datagram) {
	all := pick{per: 4, max: 30}
	byType := map[wire.Type]*pick{}
	for _, d := range crem {
		h, err := wire.ParseHeader(d.Payload)
		if err != nil {
			continue
		}
		kind := fmt.Sprintf("%v/%#x", h.Type, h.Flags)
		if all.take(kind) {
			w.put("wire/FuzzParse", d.Payload)
		}
		p := byType[h.Type]
		if p == nil {
			p = &pick{per: 3, max: 12}
			byType[h.Type] = p
		}
		if p.take(fmt.Sprintf("%#x/%d", h.Flags, len(d.Payload)/256)) {
			w.put("wire/"+wireTargets[h.Type], d.Payload)
		}
	}
}

// roce: packets of every opcode, and their headers for the header parsers.
func (w *corpusWriter) roce(rdma []fuzzcorpus.Datagram) {
	pkts, bth, reth, aeth, tc, icrc := pick{per: 3, max: 30}, pick{per: 1, max: 20}, pick{per: 3, max: 10},
		pick{per: 3, max: 10}, pick{per: 10, max: 10}, pick{per: 1, max: 20}
	for _, d := range rdma {
		p, err := roce.ParsePacket(d.Payload)
		if err != nil {
			continue
		}
		op := p.BTH.OpCode.String()
		if p.Has(roce.HasTCAETH) {
			op += "+TCAETH"
		}
		if pkts.take(fmt.Sprintf("%s/%d", op, len(p.Payload)/512)) {
			w.put("roce/FuzzParsePacket", d.Payload)
		}
		if bth.take(op) {
			w.put("roce/FuzzBTH", d.Payload[:roce.BTHLen])
		}
		if icrc.take(op) {
			w.put("roce/FuzzICRC", d.IP, d.UDP, d.Payload)
		}
		rest := d.Payload[roce.BTHLen:]
		if p.Has(roce.HasRETH) && reth.take(op) {
			w.put("roce/FuzzRETH", rest[:roce.RETHLen])
		}
		if p.Has(roce.HasAETH) && aeth.take(fmt.Sprintf("%#x", p.AETH.Syndrome)) {
			w.put("roce/FuzzAETH", rest[:roce.AETHLen])
		}
		if p.Has(roce.HasTCAETH) && tc.take(op) {
			w.put("roce/FuzzTCAETH", rest[roce.AETHLen:roce.AETHLen+roce.TCAETHLen])
		}
	}
}

// capture: frames of every kind for the decoder; small captures for the reader.
func (w *corpusWriter) capture(ds []fuzzcorpus.Datagram) {
	frames := pick{per: 2, max: 20}
	for _, d := range ds {
		if frames.take(kindOf(d.Payload)) {
			w.put("capture/FuzzDecodeUDP", uint16(d.LinkType), d.Data)
		}
	}
	for _, n := range []int{1, 3, 8} {
		var buf bytes.Buffer
		cw, err := capture.NewWriter(&buf)
		if err != nil {
			w.t.Fatal(err)
		}
		for i, d := range ds[:min(n, len(ds))] {
			if err := cw.WriteFrame(time.Unix(1700000000, int64(i)*1000), d.Data); err != nil {
				w.t.Fatal(err)
			}
		}
		w.put("capture/FuzzReader", buf.Bytes())
	}
}

// kindOf names a datagram's CREM message type or RoCEv2 opcode.
func kindOf(b []byte) string {
	if h, err := wire.ParseHeader(b); err == nil {
		return h.Type.String()
	}
	if len(b) > 0 {
		return roce.Opcode(b[0]).String()
	}
	return "empty"
}

// csf: the lab's traffic as FuzzSender's operations (csf/fuzz_test.go's format): one queue
// pair's packets that take a PSN (sources, their QP set to the harness's flow and cut to their
// headers and a little payload), the acknowledgements of those PSNs (set to the harness's
// reverse QP), and the messages a CRF sends, with a little time between them.
func (w *corpusWriter) csf(ds []fuzzcorpus.Datagram) {
	const (
		fopRaw, fopReverse, fopMessage, fopTime = 1, 2, 3, 5
		cut                                     = 64
	)
	psnOf := func(b []byte) uint32 { return uint32(b[9])<<16 | uint32(b[10])<<8 | uint32(b[11]) }
	qpOf := func(b []byte) uint32 { return uint32(b[5])<<16 | uint32(b[6])<<8 | uint32(b[7]) }
	for start := 0; start < len(ds) && w.written["csf/FuzzSender"] < 8; start += len(ds) / 8 {
		in := []byte{0, 2 | 0x20, 0, 0, 0} // k 8, m 2, the reverse QP known, established
		qp, haveQP := uint32(0), false
		var lo, hi uint32 // the PSNs of the sources so far
		for _, d := range ds[start:] {
			if len(in) > 4000 {
				break
			}
			b := d.Payload
			h, err := wire.ParseHeader(b)
			switch {
			case err == nil && (h.Type == wire.TypeRepair || h.Type == wire.TypeHello || h.Type == wire.TypeParamUpdate):
				continue // the CSF's own messages are not its input
			case err == nil:
				arg := b[:min(len(b), 250)]
				in = append(append(in, fopMessage, byte(1+len(arg)), 0), arg...) // Flow ID set by the harness
			case len(b) < roce.BTHLen:
				continue
			case roce.Opcode(b[0]).Info().Source:
				if !haveQP {
					qp, haveQP, lo = qpOf(b), true, psnOf(b)
				}
				if qpOf(b) != qp {
					continue
				}
				hi = psnOf(b)
				arg := append([]byte(nil), b[:min(len(b), cut)]...)
				in = append(append(in, fopRaw, byte(1+len(arg)), 0), arg...) // QP set by the harness
			default:
				if p := psnOf(b); !haveQP || (p-lo)&0xffffff > (hi-lo)&0xffffff {
					continue // not an acknowledgement of this queue pair's sources
				}
				arg := append([]byte(nil), b[:min(len(b), cut)]...)
				arg[5], arg[6], arg[7] = 0, 0, 0x22 // the harness's reverse QP
				in = append(append(in, fopReverse, byte(3+len(arg)), 4, 0, 0), arg...)
			}
			in = append(in, fopTime, 3, 0, 20, 0) // 20 us
		}
		w.put("csf/FuzzSender", in)
	}
}

// rc: the requester's packets, one at a time and as sequences (rc/fuzz_test.go's format: 0xff,
// then for each packet its length in 8-octet units and the packet padded to that).
func (w *corpusWriter) rc(rdma []fuzzcorpus.Datagram) {
	single := pick{per: 2, max: 12}
	var seq [][]byte
	for _, d := range rdma {
		if len(d.Payload) < roce.BTHLen {
			continue
		}
		op := roce.Opcode(d.Payload[0])
		if !op.Info().Request {
			continue
		}
		if single.take(op.String()) {
			w.put("rc/FuzzResponderMemorySafety", d.Payload, uint8(len(seq)%3))
		}
		if len(d.Payload) <= 255*8 {
			seq = append(seq, d.Payload)
		}
	}
	for n := 0; n+6 <= len(seq) && n < 6*6; n += 6 {
		in := []byte{0xff}
		for _, p := range seq[n : n+6] {
			p = append([]byte(nil), p...)
			for len(p)%8 != 0 {
				p = append(p, 0)
			}
			in = append(in, byte(len(p)/8))
			in = append(in, p...)
		}
		w.put("rc/FuzzResponderMemorySafety", in, uint8(n%3))
	}
}

// pairing: runs of packets of both directions cut to FuzzLearner's 40-octet chunks (its format:
// a length octet, len%40+1, then the chunk).
func (w *corpusWriter) pairing(rdma []fuzzcorpus.Datagram) {
	for n := 0; n+24 <= len(rdma) && n < 24*6; n += 24 {
		var in []byte
		for _, d := range rdma[n : n+24] {
			c := d.Payload[:min(len(d.Payload), 40)]
			in = append(in, byte(len(c)-1))
			in = append(in, c...)
		}
		w.put("pairing/FuzzLearner", in)
	}
}
