// Package dissector ships crem.lua, a Wireshark dissector for the nine CREM messages and for
// the T/C AETH of extended ACKs, and the tests that check it against the project's own encoders
// and decoders through tshark.
//
// Use it with Wireshark or tshark, giving the domain's CREM port (the draft assigns none):
//
//	tshark -X lua_script:dissector/crem.lua -o crem.port:50000 -r capture.pcap -V
//
// or copy crem.lua into Wireshark's personal plugins folder and set the port under
// Preferences > Protocols > CREM.
//
// # CREM
//
// A datagram whose destination port is the CREM port is CREM (the draft sends every CREM
// message to that port, and the domain keeps it for CREM); one that has the port only as its
// source is left to other dissectors. Fields are named after the draft (crem.flow_id,
// crem.repair_index, ...). Problems are expert info of group Malformed, severity Error, each
// with its own name, and each also adds a generated text field crem.malformed, so that the
// filter crem.malformed finds every malformed message:
//
//	crem.bad_version            Version other than 1 (receivers discard the message)
//	crem.unknown_type           Type outside 1..9 (receivers discard the message)
//	crem.short                  the message ends inside a field, or inside the header
//	crem.length_mismatch        Length differs from the datagram (the fields are read within the shorter)
//	crem.trailing               octets after the message's fields
//	crem.too_many_entries       PATH_REPORT Entry Count above 16
//	crem.psn_count_beyond       a hop entry's PSN Count runs beyond the message
//	crem.range_count_beyond     a PSN-range REPAIR_REQUEST's Range Count runs beyond the message
//	crem.symbol_length_mismatch REPAIR Symbol Length disagrees with the octets after the bitmaps
//	crem.bad_field              a value the draft does not allow: k 0, AF not 4 or 6, RETX with
//	                            INFO, a nonzero Flow ID in HELLO or PATH_REPORT, Range Count 0
//
// # T/C AETH
//
// Wireshark's InfiniBand dissector decodes RoCEv2 on UDP port 4791 (another port with
// -d udp.port==N,infiniband) and stops after the AETH. The postdissector tcaeth looks at every
// RoCEv2 BTH it decoded: an RC ACKNOWLEDGE (opcode 17) whose UDP payload is 52 octets (BTH 12,
// AETH 4, T/C AETH 32, ICRC 4), or an RC ATOMIC ACKNOWLEDGE (18) of 60 (the Atomic ACK ETH
// after the fragment), carries the T/C AETH right after the AETH, as the project's receivers
// decide (RULINGS T2). It shows tcaeth.segment_num, tcaeth.last_finished_psn, a tcaeth.seg_left
// and tcaeth.seg_right per Seg field in use (SegmentNum - 1 of them), tcaeth.unused,
// tcaeth.reserved and tcaeth.padding (RULINGS T1), and per gap between reported blocks the
// draft's lost range as generated fields tcaeth.lost_first, tcaeth.lost_last and
// tcaeth.lost_count (the PSNs strictly between, in 24-bit serial arithmetic), with their sum
// tcaeth.lost_total. An ATOMIC ACKNOWLEDGE's Atomic ACK ETH is tcaeth.atomic_original_data (the
// InfiniBand dissector reads the fragment's first octets in its place).
//
// Its expert info: tcaeth.lost (Sequence, Note) on each gap; tcaeth.bad_segment_num,
// tcaeth.bad_order (T3), tcaeth.ack_length (an ACK neither plain nor extended) and
// tcaeth.truncated (Malformed, Error); tcaeth.nonzero (unused, reserved or padding octets not
// zero) and tcaeth.psn_mismatch (BTH PSN other than Last Finished PSN, T2) (Protocol,
// Warning). The malformed ones also add the text field tcaeth.malformed.
package dissector
