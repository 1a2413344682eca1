package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/pcapstats"
	"github.com/crem-project/crem/roce"
)

const pcapDescription = `Works on packet capture files (pcap or pcapng, as tcpdump, tshark and Wireshark write them).

Subcommands:
  verify FILE [--each]                find every RoCEv2 packet in FILE and check its ICRC
  stats FILE --crem-port N [--json]   summarise the CREM and RoCEv2 traffic of FILE

Run "crem pcap verify --help" or "crem pcap stats --help" for the details.`

const pcapVerifyDescription = `Reads FILE (pcap or pcapng; Ethernet with any VLAN tags, raw IP or Linux cooked
captures) and finds every RoCEv2 packet: UDP to destination port 4791, over IPv4 or IPv6.
For each it checks the ICRC, the CRC-32 that ends every RoCEv2 packet and covers the packet
and its IP and UDP headers except the fields routers may change (IPv4 TOS, TTL and header
checksum; IPv6 traffic class, flow label and hop limit; the UDP checksum; BTH octet 4), as
Linux Soft-RoCE computes it.

Once FILE is open, the last line on standard output is
  roce: N packets, N icrc ok, N icrc bad
and diagnostics (which frames are bad and why, frames that could not be checked) go to
standard error. Exit status: 0 when no ICRC is bad, 1 when any is, 2 when FILE cannot be
read (missing, not a capture, or cut short; the reason is on standard error).

With --each, one line per RoCEv2 packet comes first:
  frame 15: 192.168.70.4:69 -> 192.168.70.6:4791 qp 0x000048 SEND_ONLY_WITH_IMMEDIATE psn 0 icrc ok
(frame number as tshark counts, source and destination address:port, destination QP, opcode,
PSN, verdict). Flags may come before or after FILE.

Example:
  crem pcap verify --each trace.pcapng`

func runPcap(args []string, s stdio) int {
	fs := newFlagSet("pcap", "crem pcap <subcommand> [flags] FILE", pcapDescription, s)
	if code, done := parseFlags(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		fs.Usage()
		return 2
	}
	switch sub := fs.Arg(0); sub {
	case "verify":
		return runPcapVerify(fs.Args()[1:], s)
	case "stats":
		return runPcapStats(fs.Args()[1:], s)
	default:
		fmt.Fprintf(s.err, "crem pcap: unknown subcommand %q (see crem pcap --help)\n", sub)
		return 2
	}
}

// parseInterleaved parses flags that may come before, between or after the positional
// arguments (the flag package stops at the first non-flag); "--" ends the flags.
func parseInterleaved(fs *flag.FlagSet, args []string) (positional []string, code int, done bool) {
	var rest []string
	for i, a := range args {
		if a == "--" {
			args, rest = args[:i], args[i+1:]
			break
		}
	}
	for {
		if code, done := parseFlags(fs, args); done {
			return nil, code, true
		}
		args = fs.Args()
		if len(args) == 0 {
			return append(positional, rest...), 0, false
		}
		positional, args = append(positional, args[0]), args[1:]
	}
}

// verifyTally counts what crem pcap verify saw.
type verifyTally struct {
	packets, ok, bad int
	cut              int   // RoCEv2 or undecodable frames cut short by the snap length
	fragments        int   // IP fragments, which RoCEv2 never sends
	undecodable      int   // frames whose headers are broken
	firstProblem     error // the first reason a frame could not be decoded
}

func runPcapVerify(args []string, s stdio) int {
	fs := newFlagSet("pcap verify", "crem pcap verify FILE [--each]", pcapVerifyDescription, s)
	each := fs.Bool("each", false, "list every RoCEv2 packet (frame, addresses, QP, opcode, PSN, verdict) before the summary")
	files, code, done := parseInterleaved(fs, args)
	if done {
		return code
	}
	if len(files) != 1 {
		fmt.Fprintf(s.err, "crem pcap verify: want exactly one FILE, got %d (see crem pcap verify --help)\n", len(files))
		return 2
	}
	f, err := os.Open(files[0])
	if err != nil {
		fmt.Fprintf(s.err, "crem pcap verify: %v\n", err)
		return 2
	}
	defer f.Close()
	r, err := capture.NewReader(f)
	if err != nil {
		fmt.Fprintf(s.err, "crem pcap verify: %s: %v\n", files[0], err)
		return 2
	}
	var t verifyTally
	readErr := t.run(r, *each, s)
	if t.cut > 0 {
		fmt.Fprintf(s.err, "crem pcap verify: %d frames cut short by the capture's snap length were not checked\n", t.cut)
	}
	if t.fragments > 0 {
		fmt.Fprintf(s.err, "crem pcap verify: %d IP fragments skipped (RoCEv2 is never fragmented)\n", t.fragments)
	}
	if t.undecodable > 0 {
		fmt.Fprintf(s.err, "crem pcap verify: %d frames could not be decoded, the first because: %v\n", t.undecodable, t.firstProblem)
	}
	if readErr != nil {
		fmt.Fprintf(s.err, "crem pcap verify: %s: %v\n", files[0], readErr)
	}
	fmt.Fprintf(s.out, "roce: %d packets, %d icrc ok, %d icrc bad\n", t.packets, t.ok, t.bad)
	switch {
	case readErr != nil:
		return 2
	case t.bad > 0:
		return 1
	}
	return 0
}

// run checks every RoCEv2 packet of r and returns the error that stopped the reading, if any.
func (t *verifyTally) run(r *capture.Reader, each bool, s stdio) error {
	for {
		fr, err := r.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return err
		}
		d, err := capture.DecodeUDP(fr.LinkType, fr.Data)
		switch {
		case err == nil:
		case errors.Is(err, capture.ErrNotUDP):
			continue
		case errors.Is(err, capture.ErrFragment):
			t.fragments++
			continue
		case fr.Truncated():
			t.cut++
			continue
		default:
			t.undecodable++
			if t.firstProblem == nil {
				t.firstProblem = fmt.Errorf("frame %d: %w", fr.Number, err)
			}
			continue
		}
		if d.Dst.Port() != roce.UDPPort {
			continue
		}
		if fr.Truncated() {
			t.cut++
			continue
		}
		t.packets++
		verdict := "ok"
		if err := roce.VerifyICRC(d.IPHeader, d.UDPHeader, d.Payload); err != nil {
			t.bad++
			verdict = "bad"
			fmt.Fprintf(s.err, "frame %d: %v\n", fr.Number, err)
		} else {
			t.ok++
		}
		// The header parse is for naming the packet; the verdict is the ICRC's alone.
		p, perr := roce.ParsePacket(d.Payload)
		if perr != nil {
			fmt.Fprintf(s.err, "frame %d: %v\n", fr.Number, perr)
		}
		if each {
			if len(d.Payload) < roce.BTHLen+roce.ICRCLen {
				fmt.Fprintf(s.out, "frame %d: %v -> %v (too short for a BTH and an ICRC) icrc %s\n", fr.Number, d.Src, d.Dst, verdict)
				continue
			}
			fmt.Fprintf(s.out, "frame %d: %v -> %v qp %#06x %v psn %d icrc %s\n",
				fr.Number, d.Src, d.Dst, p.BTH.DestQP, p.BTH.OpCode, uint32(p.BTH.PSN), verdict)
		}
	}
}

const pcapStatsDescription = `Reads FILE (pcap or pcapng; Ethernet with any VLAN tags, raw IP or Linux cooked captures)
and summarises its CREM and RoCEv2 traffic. CREM messages are the UDP datagrams to the CREM
port, which has no default (RULINGS C14): --crem-port is required. RoCEv2 packets are those to
--roce-port (4791); --roce-port 0 takes any other UDP datagram that parses whole as RoCEv2
(transport version 0, a known opcode), as in the captures of crem lab --pcap, whose path
carries RoCEv2 between other ports.

CREM: messages by type; malformed ones (the first is named) and those of an unknown Version or
Type (discarded silently, as the draft says); flows by Flow ID with the address pairs their
messages crossed (CSF -> CRF) and the flow descriptor of the HELLO answered with that Flow ID;
blocks (distinct Flow ID, Config ID and Block Start PSN); REPAIR messages sorted into ordinary
repair symbols, coded retransmissions (the RETX flag, with the Repair Session ID of the request
answered), Source Copy symbols (scheme 0) and INFO messages; REPAIR_REQUESTs by form (block,
PSN ranges) and kind (coded, FALLBACK); LOSS_REPORT totals; PATH_REPORTs by method, with the
dropped PSNs their hop entries name; CLOSE reasons.

Restored (an estimate, not a count: the capture cannot see a CRF decode): for each block of a
flow whose HELLO names its destination QP, the present positions whose PSN was never delivered
on that QP (never seen, or seen only marked dropped), capped by the block's repair symbols that
were delivered: min(missing, symbols), summed over the blocks.

RoCEv2, per destination QP: packets; data packets (SEND, RDMA WRITE, READ responses);
retransmissions (a packet that takes a PSN, request or READ response, whose PSN was already
seen on that QP); READ requests and responses; atomics; ACKs, NAKs (of them PSN sequence
errors) and RNR NAKs by AETH syndrome; extended ACKs (with a T/C AETH); CNPs; malformed
packets; ICRC good, bad, and unchecked (checked under the captured headers for packets to port
4791 only: elsewhere the sender sealed it under a header the capture does not show).

Drops: with --drops-marked (the default), frames with IPv4 TTL 1 or IPv6 hop limit 1 are
datagrams the path dropped, as crem lab --pcap and crem netem --pcap mark them; they are
counted as sent and as dropped, never as delivered. A capture should see each transmission
once: a gateway's own capture (received and sent) shows every relayed packet twice.

Bounded: at most 4096 flows, 4096 QPs, 2^20 blocks and 2^22 PSNs are remembered; what lies
beyond is counted in the totals and as untracked.

Output: a table, or with --json one object:
  frames: total, udp, not_udp, fragments, cut, undecodable, other_udp, dropped, first_error
  crem: port, messages {total, repair, hello, hello_ack, param_update, param_ack,
    repair_request, loss_report, path_report, close, discarded, malformed, first_malformed,
    dropped}, repair {ordinary, coded_retx, source_copy, info, last, symbol_octets, delivered},
    blocks, repair_requests {total, block_form, range_form, coded, fallback, lost_positions,
    range_psns}, loss_reports {count, interval_us, expected, received, restored,
    incomplete_blocks, ce_marked, repairs_received, repairs_ce_marked}, path_reports {total,
    truncated, alt_mark, clustered_alt_mark, node_drops, other_method, hops, lost_count,
    dropped_psns, flows [{source, destination, flow_label, reports, lost_count, dropped_psns,
    psns (the first 64 named)}]}, closes {normal, idle, param_unanswered, resources_exhausted,
    circuit_breaker, protocol_error, other}, hellos {answered, unanswered},
    restored_estimate {packets, missing, blocks, unmapped, untracked}, flows [{flow_id,
    addresses, hello {source, destination, flow_kind, flow_label, dest_qp, rdma_mtu},
    messages, repair, blocks, config_ids, repair_requests, loss_reports, closes,
    restored_estimate}], flows_untracked, blocks_untracked
  roce: port, the QP figures over all QPs, qps [{dest_qp, ...}], qps_untracked,
    psns_untracked, no_bth; QP figures: packets, data_packets, retransmissions, read_requests,
    read_responses, atomics, acks, naks, nak_sequence, rnr_naks, extended_acks, cnps,
    malformed, icrc_ok, icrc_bad, icrc_unchecked, dropped, missing_psns

Exit status: 0 once FILE is summarised; 2 when --crem-port is missing, or FILE cannot be read
(missing, not a capture, or cut short: the summary of what was read is still printed). Flags
may come before or after FILE.

Example:
  crem pcap stats --crem-port 50000 trace.pcapng
  crem lab --pcap lab.pcap --crem-port 50000 && crem pcap stats lab.pcap --crem-port 50000 --roce-port 0 --json`

func runPcapStats(args []string, s stdio) int {
	fs := newFlagSet("pcap stats", "crem pcap stats FILE --crem-port N [--roce-port 4791] [--drops-marked] [--json]", pcapStatsDescription, s)
	cremPort := fs.Int("crem-port", 0, "the CREM `port` CREM messages are sent to (required: there is no default, RULINGS C14)")
	rocePort := fs.Int("roce-port", roce.UDPPort, "the RoCEv2 UDP destination `port`; 0 takes any datagram that parses as RoCEv2")
	dropsMarked := fs.Bool("drops-marked", true, "frames with TTL (hop limit) 1 are datagrams the path dropped, as crem lab and crem netem --pcap mark them")
	asJSON := fs.Bool("json", false, "print the summary as one JSON object (field names in --help)")
	files, code, done := parseInterleaved(fs, args)
	if done {
		return code
	}
	if *cremPort == 0 {
		fmt.Fprintln(s.err, "crem pcap stats: --crem-port is required: CREM has no default port (RULINGS C14); give the port the gateways use")
		return 2
	}
	if len(files) != 1 {
		fmt.Fprintf(s.err, "crem pcap stats: want exactly one FILE, got %d (see crem pcap stats --help)\n", len(files))
		return 2
	}
	o := pcapstats.Options{CREMPort: *cremPort, RoCEPort: *rocePort, DropsMarked: *dropsMarked}
	if _, err := pcapstats.New(o); err != nil {
		fmt.Fprintf(s.err, "crem pcap stats: %v\n", err)
		return 2
	}
	f, err := os.Open(files[0])
	if err != nil {
		fmt.Fprintf(s.err, "crem pcap stats: %v\n", err)
		return 2
	}
	defer f.Close()
	sum, err := pcapstats.Read(bufio.NewReaderSize(f, 1<<20), o)
	if err != nil && sum.Frames.Total == 0 {
		fmt.Fprintf(s.err, "crem pcap stats: %s: %v\n", files[0], err)
		return 2
	}
	if *asJSON {
		enc := json.NewEncoder(s.out)
		enc.SetIndent("", "  ")
		if werr := enc.Encode(sum); werr != nil {
			fmt.Fprintf(s.err, "crem pcap stats: %v\n", werr)
			return 2
		}
	} else {
		writeStatsTable(s.out, &sum)
	}
	if err != nil {
		fmt.Fprintf(s.err, "crem pcap stats: %s: %v\n", files[0], err)
		return 2
	}
	return 0
}

// writeStatsTable prints the summary for people.
func writeStatsTable(w io.Writer, sum *pcapstats.Summary) {
	fr, c, r := &sum.Frames, &sum.CREM, &sum.RoCE
	fmt.Fprintf(w, "frames: %d, %d UDP (%d marked dropped), %d not UDP, %d fragments, %d cut, %d undecodable, %d other UDP\n",
		fr.Total, fr.UDP, fr.Dropped, fr.NotUDP, fr.Fragments, fr.Cut, fr.Undecodable, fr.OtherUDP)
	if fr.FirstError != "" {
		fmt.Fprintf(w, "  first undecodable: %s\n", fr.FirstError)
	}
	m := &c.Messages
	fmt.Fprintf(w, "\ncrem (port %d): %d messages, %d marked dropped, %d malformed, %d discarded (unknown version or type)\n",
		c.Port, m.Total, m.Dropped, m.Malformed, m.Discarded)
	fmt.Fprintf(w, "  REPAIR %d, HELLO %d, HELLO_ACK %d, PARAM_UPDATE %d, PARAM_ACK %d, REPAIR_REQUEST %d, LOSS_REPORT %d, PATH_REPORT %d, CLOSE %d\n",
		m.Repair, m.Hello, m.HelloAck, m.ParamUpdate, m.ParamAck, m.RepairRequest, m.LossReport, m.PathReport, m.Close)
	if m.FirstMalformed != "" {
		fmt.Fprintf(w, "  first malformed: %s\n", m.FirstMalformed)
	}
	fmt.Fprintf(w, "  repair: %d ordinary, %d coded retransmission, %d Source Copy, %d info; %d symbols delivered; %d blocks\n",
		c.Repair.Ordinary, c.Repair.CodedRetx, c.Repair.SourceCopy, c.Repair.Info, c.Repair.Delivered, c.Blocks)
	q := &c.RepairRequests
	fmt.Fprintf(w, "  repair requests: %d (%d block form, %d range form; %d coded, %d fallback), %d lost positions, %d range PSNs\n",
		q.Total, q.BlockForm, q.RangeForm, q.Coded, q.Fallback, q.LostPositions, q.RangePSNs)
	l := &c.LossReports
	fmt.Fprintf(w, "  loss reports: %d, expected %d, received %d, restored %d, CE marked %d, incomplete blocks %d\n",
		l.Count, l.Expected, l.Received, l.Restored, l.CEMarked, l.IncompleteBlocks)
	p := &c.PathReports
	fmt.Fprintf(w, "  path reports: %d (alternate marking %d, clustered %d, node drops %d, other %d), %d hops, lost %d, %d dropped PSNs named, %d truncated\n",
		p.Total, p.AltMark, p.ClusteredAltMark, p.NodeDrops, p.OtherMethod, p.Hops, p.LostCount, p.DroppedPSNs, p.Truncated)
	for i := range p.Flows {
		pf := &p.Flows[i]
		psns := make([]string, len(pf.PSNs))
		for j, q := range pf.PSNs {
			psns[j] = fmt.Sprint(q)
		}
		more := ""
		if uint64(len(pf.PSNs)) < pf.DroppedPSNs {
			more = fmt.Sprintf(" (first %d of %d)", len(pf.PSNs), pf.DroppedPSNs)
		}
		fmt.Fprintf(w, "    %s -> %s flow label %#06x: %d reports, lost %d, dropped PSNs%s: %s\n", pf.Source, pf.Destination,
			pf.FlowLabel, pf.Reports, pf.LostCount, more, strings.Join(psns, " "))
	}
	cl := &c.Closes
	fmt.Fprintf(w, "  close: normal %d, idle %d, param unanswered %d, resources exhausted %d, circuit breaker %d, protocol error %d, other %d\n",
		cl.Normal, cl.Idle, cl.ParamUnanswered, cl.ResourcesExhausted, cl.CircuitBreaker, cl.ProtocolError, cl.Other)
	e := &c.Restored
	fmt.Fprintf(w, "  restored (estimate): %d packets over %d blocks, per block min(present positions never delivered, repair symbols delivered); %d missing; %d blocks without a HELLO, %d untracked\n",
		e.Packets, e.Blocks, e.Missing, e.Unmapped, e.Untracked)
	if c.FlowsUntracked+c.BlocksUntracked > 0 {
		fmt.Fprintf(w, "  untracked: %d messages beyond the flow limit, %d REPAIRs beyond the block limit\n", c.FlowsUntracked, c.BlocksUntracked)
	}
	if len(c.Flows) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  FLOW ID\tDEST QP\tMESSAGES\tBLOCKS\tORDINARY\tCODED RETX\tSOURCE COPY\tREQUESTS\tRESTORED~\tADDRESSES")
		for i := range c.Flows {
			f := &c.Flows[i]
			qp := "-"
			if f.Hello != nil {
				qp = fmt.Sprintf("%#06x", f.Hello.DestQP)
			}
			fmt.Fprintf(tw, "  %#08x\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%s\n", f.FlowID, qp, f.Messages.Total, f.Blocks,
				f.Repair.Ordinary, f.Repair.CodedRetx, f.Repair.SourceCopy, f.RepairRequests.Total, f.Restored.Packets,
				strings.Join(f.Addresses, ", "))
		}
		tw.Flush()
	}
	port := fmt.Sprint(r.Port)
	if r.Port == 0 {
		port = "any"
	}
	fmt.Fprintf(w, "\nroce (port %s): %d packets, %d data, %d retransmissions, %d ICRC bad, %d unchecked, %d marked dropped, %d data PSNs missing\n",
		port, r.Packets, r.DataPackets, r.Retransmissions, r.ICRCBad, r.ICRCUnchecked, r.Dropped, r.MissingPSNs)
	if r.QPsUntracked+r.PSNsUntracked+r.NoBTH > 0 {
		fmt.Fprintf(w, "  untracked: %d packets beyond the QP limit, %d PSNs beyond the PSN limit, %d too short for a BTH\n",
			r.QPsUntracked, r.PSNsUntracked, r.NoBTH)
	}
	if len(r.QPs) > 0 {
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintln(tw, "  DEST QP\tPACKETS\tDATA\tRETX\tREAD REQ\tREAD RESP\tACK\tNAK\tRNR NAK\tEXT ACK\tICRC OK\tICRC BAD\tUNCHECKED\tMALFORMED\tDROPPED\tMISSING")
		row := func(name string, x *pcapstats.QPCounts) {
			fmt.Fprintf(tw, "  %s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\n", name, x.Packets, x.DataPackets,
				x.Retransmissions, x.ReadRequests, x.ReadResponses, x.ACKs, x.NAKs, x.RNRNAKs, x.ExtendedACKs, x.ICRCOK, x.ICRCBad,
				x.ICRCUnchecked, x.Malformed, x.Dropped, x.MissingPSNs)
		}
		for i := range r.QPs {
			row(fmt.Sprintf("%#06x", r.QPs[i].DestQP), &r.QPs[i].QPCounts)
		}
		row("total", &r.QPCounts)
		tw.Flush()
	}
}
