package main

import (
	"bytes"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/crem-project/crem/fec"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// The Appendix example's constants.
const (
	demoFlowID    = 0x0000BEEF
	demoConfigID  = 1
	demoBlockPSN  = psn.PSN(0x001000)
	demoRequestID = 7
	demoK         = 4
	demoM         = 2
	demoT         = 16
)

func runDemo(args []string, s stdio) int {
	fs := newFlagSet("demo", "crem demo",
		`Tells the CREM draft's Appendix example as a story, with the bytes of every step:
a block of four RoCEv2 payloads ("RDMA-PKT-0".."RDMA-PKT-3"), two ordinary repair
symbols, three packets lost, one REPAIR_REQUEST, one coded retransmission, three
packets restored. Every value is computed, then checked against the draft's bytes.`, s)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if err := demo(s.out); err != nil {
		fmt.Fprintf(s.err, "crem demo: %v\n", err)
		return 1
	}
	return 0
}

func demo(w io.Writer) error {
	enc, err := fec.NewEncoder()
	if err != nil {
		return err
	}
	dec, err := fec.NewDecoder()
	if err != nil {
		return err
	}
	payloads := make([][]byte, demoK)
	symbols := make([][]byte, demoK)
	var present psn.Bitmap
	fmt.Fprintf(w, "1. The RDMA sender emits four packets, PSN %v to %v. The CSF forms one block\n", demoBlockPSN, demoBlockPSN.Add(demoK-1))
	fmt.Fprintf(w, "   (k = %d, T = %d): each source symbol is uint16(len(P)) || P || zero padding.\n", demoK, demoT)
	for j := range payloads {
		payloads[j] = []byte(fmt.Sprintf("RDMA-PKT-%d", j))
		if symbols[j], err = fec.AppendSymbol(nil, payloads[j], demoT); err != nil {
			return err
		}
		present.Set(j)
		fmt.Fprintf(w, "   S%d = %x   (%q)\n", j, symbols[j], payloads[j])
	}

	fmt.Fprintf(w, "\n2. The block closes; the CSF sends m = %d ordinary repair symbols over all present positions.\n", demoM)
	ordinary := [][]byte{make([]byte, demoT), make([]byte, demoT)}
	if err := enc.Encode(ordinary, []int{0, 1}, present, symbols); err != nil {
		return err
	}
	for i, sym := range ordinary {
		msg := wire.Repair{FlowID: demoFlowID, Last: i == demoM-1, ConfigID: demoConfigID, Scheme: wire.SchemeCauchy,
			K: demoK, RepairIndex: uint8(i), BlockStartPSN: demoBlockPSN, Present: present, Symbol: sym}
		b, err := msg.Append(nil)
		if err != nil {
			return err
		}
		fmt.Fprintf(w, "   R%d = %x\n   REPAIR (%d octets): %s\n", i, sym, len(b), spaced(b))
	}

	fmt.Fprintln(w, "\n3. The path drops PSNs 0x001000, 0x001001 and 0x001002. The CRF holds S3, R0 and R1.")
	if err := dec.Reset(fec.SchemeCauchy, demoK, demoT, present); err != nil {
		return err
	}
	if err := dec.AddSource(3, payloads[3]); err != nil {
		return err
	}
	for i, sym := range ordinary {
		if err := dec.AddRepair(i, present, sym); err != nil {
			return err
		}
	}
	st := dec.Status()
	var lost psn.Bitmap
	for _, j := range []int{0, 1, 2} {
		lost.Set(j)
	}
	x, r := lost.Count(), demoM
	suggested := x - r // delta = 0 on a clean path
	fmt.Fprintf(w, "   %d unknowns, %d repair symbols: %d more needed, so the block is incomplete.\n", st.U, r, st.Missing)
	req := wire.RepairRequest{FlowID: demoFlowID, RequestID: demoRequestID, ConfigID: demoConfigID, Scheme: wire.SchemeCauchy,
		K: demoK, RepairsHeld: uint8(r), BlockStartPSN: demoBlockPSN, SuggestedM: uint8(suggested), Lost: lost}
	b, err := req.Append(nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   REPAIR_REQUEST: L = {0, 1, 2}, X = %d, r = %d, M_s = X - r = %d, Request ID %d\n   %s\n", x, r, suggested, demoRequestID, spaced(b))

	fmt.Fprintln(w, "\n4. The CSF answers with a coded retransmission: one symbol, Repair Index 2, computed over L only.")
	retx := [][]byte{make([]byte, demoT)}
	if err := enc.Encode(retx, []int{2}, lost, symbols); err != nil {
		return err
	}
	msg := wire.Repair{FlowID: demoFlowID, Retx: true, ConfigID: demoConfigID, Scheme: wire.SchemeCauchy, K: demoK,
		RepairIndex: 2, BlockStartPSN: demoBlockPSN, RepairSessionID: demoRequestID, Present: present, Lost: lost, Symbol: retx[0]}
	b, err = msg.Append(nil)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "   R2[L] = %x\n   REPAIR (%d octets): %s\n", retx[0], len(b), spaced(b))
	want, _ := hex.DecodeString("1180002c0000beef0101040200100000000700" + "10f0000000e0000000" + "00354fdf6d4b40b57e5c400000000000")
	if !bytes.Equal(b, want) {
		return fmt.Errorf("the coded retransmission differs from the draft's Appendix bytes")
	}
	fmt.Fprintln(w, "   These are the Appendix's 44 octets, byte for byte.")

	fmt.Fprintln(w, "\n5. The CRF subtracts C(0,3)*S3 from R0 and C(1,3)*S3 from R1 and solves the 3 x 3 Cauchy system.")
	if err := dec.AddRepair(2, lost, retx[0]); err != nil {
		return err
	}
	restored, err := dec.Decode()
	if err != nil {
		return err
	}
	n := 0
	for _, j := range restored.Positions(nil) {
		p, err := dec.Payload(j)
		if err != nil {
			return err
		}
		if !bytes.Equal(p, payloads[j]) {
			return fmt.Errorf("position %d restored wrong: %q", j, p)
		}
		n++
		fmt.Fprintf(w, "   restored PSN %v: %q\n", demoBlockPSN.Add(j), p)
	}
	if n != 3 {
		return fmt.Errorf("restored %d packets, want 3", n)
	}
	fmt.Fprintln(w, "\nThree lost packets were recovered with one retransmitted symbol, in one round trip.")
	return nil
}

// spaced renders octets as lower-case hex pairs separated by spaces, as the draft prints them.
func spaced(b []byte) string {
	var buf bytes.Buffer
	for i, c := range b {
		if i > 0 {
			buf.WriteByte(' ')
		}
		fmt.Fprintf(&buf, "%02x", c)
	}
	return buf.String()
}
