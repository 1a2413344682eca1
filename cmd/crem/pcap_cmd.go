package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/roce"
)

const pcapDescription = `Works on packet capture files (pcap or pcapng, as tcpdump, tshark and Wireshark write them).

Subcommands:
  verify FILE [--each]   find every RoCEv2 packet in FILE and check its ICRC

Run "crem pcap verify --help" for the details.`

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
