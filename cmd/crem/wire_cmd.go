package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// wireExampleHex is the REPAIR message of the draft's Appendix, the example in the help texts.
const wireExampleHex = "11 80 00 2c 00 00 be ef 01 01 04 02 00 10 00 00 00 07 00 10 f0 00 00 00 e0 00 00 00 " +
	"00354fdf6d4b40b57e5c400000000000"

var wireHelp = `Usage: crem wire <subcommand> [flags] [arguments]

CREM speaks nine message types on its UDP port: REPAIR, HELLO, HELLO_ACK, PARAM_UPDATE,
PARAM_ACK, REPAIR_REQUEST, LOSS_REPORT, PATH_REPORT and CLOSE. Each starts with the common
header (Version, Type, Flags, Length, Flow ID). "crem wire" shows what such a message says.

Subcommands:
  decode    print one CREM message, given in hex, as a JSON object

Example (the REPAIR message of the draft's Appendix):
  crem wire decode ` + wireExampleHex + `

Run "crem wire decode --help" for details.
`

func runWire(args []string, s stdio) int {
	if len(args) == 0 {
		fmt.Fprint(s.err, wireHelp)
		return 2
	}
	switch args[0] {
	case "-h", "-help", "--help", "help":
		fmt.Fprint(s.out, wireHelp)
		return 0
	case "decode":
		return runWireDecode(args[1:], s)
	}
	fmt.Fprintf(s.err, "crem wire: unknown subcommand %q (see crem wire --help)\n", args[0])
	return 2
}

var wireDecodeDescription = `Decodes one CREM message (the UDP payload sent to the CREM port) and prints it as one JSON
object on one line. The hex comes from the arguments, or from standard input when there are
none; whitespace anywhere in it is ignored, so "11 80 00 2c ..." works as well as "1180002c...".

Every field is named in snake_case after the draft: version, type (the name, e.g. "REPAIR"),
type_code, flags, length, flow_id, then the fields of the message type, e.g. config_id, scheme,
k, repair_index, block_start_psn, repair_session_id, symbol_length, present_bitmap,
lost_source_bitmap and symbol for REPAIR. Integers are JSON numbers, flags are booleans (retx,
last, info, ranges, fallback, truncated), bitmaps and symbols are lower-case hex, addresses are
strings. Registry values (scheme, status, reason, cause, method, flow_kind) also get a *_name.
Only fields on the wire appear: lost_source_bitmap only with retx, and a REPAIR_REQUEST shows
the fields of its form (block, or range_count and psn_ranges with ranges).

Exit status 0 when the message is well formed. Otherwise, an unknown Version or Type included
(a CREM node drops those silently) and bad hex, exit status 1 and one line on standard error
that names the problem, e.g. "wire: REPAIR: k: 0 is out of range 1..255".

Example, the REPAIR message of the draft's Appendix:
  crem wire decode ` + wireExampleHex + `
  echo "` + wireExampleHex + `" | crem wire decode --indent`

func runWireDecode(args []string, s stdio) int {
	fs := newFlagSet("wire decode", "crem wire decode [--indent] [HEX...]", wireDecodeDescription, s)
	indent := fs.Bool("indent", false, "indent the JSON object over several lines")
	if code, done := parseFlags(fs, args); done {
		return code
	}
	fail := func(format string, a ...any) int {
		// One line, whatever the error text holds.
		msg := strings.ReplaceAll(fmt.Sprintf(format, a...), "\n", " ")
		fmt.Fprintln(s.err, "crem wire decode: "+msg)
		return 1
	}
	var text string
	if fs.NArg() > 0 {
		text = strings.Join(fs.Args(), "")
	} else {
		if s.in == nil {
			return fail("no hex given (argument or standard input)")
		}
		in, err := io.ReadAll(s.in)
		if err != nil {
			return fail("reading standard input: %v", err)
		}
		text = string(in)
	}
	text = strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) {
			return -1
		}
		return r
	}, text)
	if text == "" {
		return fail("no hex given (argument or standard input)")
	}
	b, err := hex.DecodeString(text)
	if err != nil {
		return fail("bad hex: %v", strings.TrimPrefix(err.Error(), "encoding/hex: "))
	}
	m, err := wire.Parse(b)
	if err != nil {
		if errors.Is(err, wire.ErrDiscard) {
			return fail("%v (a CREM node drops such a message)", err)
		}
		return fail("%v", err)
	}
	h, _ := wire.ParseHeader(b) // Parse succeeded, so the header is good
	obj := messageJSON(h, m)
	var out []byte
	if *indent {
		out, err = json.MarshalIndent(obj, "", "  ")
	} else {
		out, err = json.Marshal(obj)
	}
	if err != nil {
		return fail("encoding JSON: %v", err)
	}
	s.out.Write(append(out, '\n'))
	return 0
}

// jsonObject is a JSON object whose keys keep the order of the draft's figures.
type jsonObject []jsonField

type jsonField struct {
	key string
	val any
}

func (o *jsonObject) add(key string, val any) { *o = append(*o, jsonField{key, val}) }

func (o jsonObject) MarshalJSON() ([]byte, error) {
	var buf bytes.Buffer
	buf.WriteByte('{')
	for i, f := range o {
		if i > 0 {
			buf.WriteByte(',')
		}
		k, err := json.Marshal(f.key)
		if err != nil {
			return nil, err
		}
		v, err := json.Marshal(f.val)
		if err != nil {
			return nil, err
		}
		buf.Write(k)
		buf.WriteByte(':')
		buf.Write(v)
	}
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

func bitmapHex(b psn.Bitmap, k uint8) string { return hex.EncodeToString(b.Append(nil, int(k))) }

func messageJSON(h wire.Header, m wire.Message) jsonObject {
	o := jsonObject{
		{"version", h.Version},
		{"type", h.Type.String()},
		{"type_code", uint8(h.Type)},
		{"flags", h.Flags},
		{"length", h.Length},
		{"flow_id", h.FlowID},
	}
	switch m := m.(type) {
	case *wire.Repair:
		o.add("retx", m.Retx)
		o.add("last", m.Last)
		o.add("info", m.Info)
		o.add("config_id", m.ConfigID)
		addScheme(&o, m.Scheme)
		o.add("k", m.K)
		o.add("repair_index", m.RepairIndex)
		o.add("block_start_psn", uint32(m.BlockStartPSN))
		o.add("repair_session_id", m.RepairSessionID)
		o.add("symbol_length", len(m.Symbol))
		o.add("present_bitmap", bitmapHex(m.Present, m.K))
		if m.Retx {
			o.add("lost_source_bitmap", bitmapHex(m.Lost, m.K))
		}
		o.add("symbol", hex.EncodeToString(m.Symbol))
	case *wire.Hello:
		addCapabilities(&o, &m.Capabilities, m.AF())
		o.add("sender_nonce", m.SenderNonce)
		o.add("source_address", m.Source.String())
		o.add("destination_address", m.Destination.String())
		o.add("flow_label", m.FlowLabel)
	case *wire.HelloAck:
		addCapabilities(&o, &m.Capabilities, m.AF)
		o.add("sender_nonce", m.SenderNonce)
		o.add("max_open_blocks", m.MaxOpenBlocks)
	case *wire.ParamUpdate:
		o.add("config_id", m.ConfigID)
		addScheme(&o, m.Scheme)
		o.add("k", m.K)
		o.add("m", m.M)
		o.add("t", m.T)
		o.add("effective_psn", uint32(m.EffectivePSN))
	case *wire.ParamAck:
		o.add("config_id", m.ConfigID)
		o.add("status", uint8(m.Status))
		o.add("status_name", m.Status.String())
	case *wire.RepairRequest:
		o.add("ranges", m.RangeForm)
		o.add("fallback", m.Fallback)
		if m.RangeForm {
			o.add("request_id", m.RequestID)
			o.add("range_count", len(m.Ranges))
			ranges := make([]jsonObject, 0, len(m.Ranges))
			for _, r := range m.Ranges {
				ranges = append(ranges, jsonObject{{"start_psn", uint32(r.Start)}, {"count", r.Count}})
			}
			o.add("psn_ranges", ranges)
			break
		}
		o.add("config_id", m.ConfigID)
		addScheme(&o, m.Scheme)
		o.add("k", m.K)
		o.add("repairs_held", m.RepairsHeld)
		o.add("block_start_psn", uint32(m.BlockStartPSN))
		o.add("suggested_m", m.SuggestedM)
		o.add("request_id", m.RequestID)
		o.add("lost_source_bitmap", bitmapHex(m.Lost, m.K))
	case *wire.LossReport:
		o.add("interval_us", m.IntervalUS)
		o.add("expected", m.Expected)
		o.add("received", m.Received)
		o.add("restored", m.Restored)
		o.add("incomplete_blocks", m.IncompleteBlocks)
		o.add("ce_marked", m.CEMarked)
		o.add("repairs_received", m.RepairsReceived)
		o.add("repairs_ce_marked", m.RepairsCEMarked)
	case *wire.PathReport:
		o.add("truncated", m.Truncated)
		o.add("method", uint8(m.Method))
		o.add("method_name", m.Method.String())
		o.add("entry_count", len(m.Hops))
		o.add("af", uint8(m.AF()))
		o.add("source_address", m.Source.String())
		o.add("destination_address", m.Destination.String())
		o.add("flow_label", m.FlowLabel)
		hops := make([]jsonObject, 0, len(m.Hops))
		for _, e := range m.Hops {
			dropped := make([]uint32, 0, len(e.DroppedPSNs))
			for _, p := range e.DroppedPSNs {
				dropped = append(dropped, uint32(p))
			}
			hops = append(hops, jsonObject{
				{"node_id", e.NodeID},
				{"marking_period_number", e.MarkingPeriodNumber},
				{"lost_count", e.LostCount},
				{"queue_delay_change_us", e.QueueDelayChangeUS},
				{"cause", uint8(e.Cause)},
				{"cause_name", e.Cause.String()},
				{"psn_count", len(e.DroppedPSNs)},
				{"dropped_psns", dropped},
			})
		}
		o.add("hop_entries", hops)
	case *wire.Close:
		o.add("reason", uint8(m.Reason))
		o.add("reason_name", m.Reason.String())
	}
	return o
}

func addScheme(o *jsonObject, s wire.Scheme) {
	o.add("scheme", uint8(s))
	o.add("scheme_name", s.String())
}

func addCapabilities(o *jsonObject, c *wire.Capabilities, af wire.AF) {
	o.add("flow_kind", uint8(c.FlowKind))
	o.add("flow_kind_name", c.FlowKind.String())
	o.add("af", uint8(af))
	o.add("supported_schemes", uint16(c.Schemes))
	o.add("max_k", c.MaxK)
	o.add("max_m", c.MaxM)
	o.add("max_t", c.MaxT)
	o.add("rdma_mtu", c.RDMAMTU)
}
