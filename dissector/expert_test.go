package dissector

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/capture"
	"github.com/crem-project/crem/internal/testenv"
	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/roce"
	"github.com/crem-project/crem/wire"
)

// Wireshark's expert groups and severities as tshark prints them (epan/proto.h).
const (
	groupSequence  = 0x02000000
	groupMalformed = 0x07000000
	groupProtocol  = 0x09000000
	severityNote   = 0x00400000
	severityWarn   = 0x00600000
	severityError  = 0x00800000
)

// expertItem is one expert info of a frame: its name (the ProtoExpert's filter name), group
// and severity.
type expertItem struct {
	name            string
	group, severity uint64
}

// decoded is what tshark -T json says of one frame: every leaf field's values, and the expert
// items.
type decoded struct {
	fields  map[string][]string
	experts []expertItem
}

func (d decoded) has(name string) bool {
	return slices.ContainsFunc(d.experts, func(e expertItem) bool { return e.name == name })
}

// walk collects the fields and expert items of a tshark JSON tree.
func walk(v any, d *decoded) {
	switch x := v.(type) {
	case []any:
		for _, e := range x {
			walk(e, d)
		}
	case map[string]any:
		for k, e := range x {
			if k == "_ws.expert" {
				for _, ex := range asList(e) {
					m, ok := ex.(map[string]any)
					if !ok {
						continue
					}
					var it expertItem
					for ek, ev := range m {
						s, _ := ev.(string)
						switch ek {
						case "_ws.expert.group":
							it.group, _ = strconv.ParseUint(s, 0, 64)
						case "_ws.expert.severity":
							it.severity, _ = strconv.ParseUint(s, 0, 64)
						case "_ws.expert.message":
						default:
							it.name = ek
						}
					}
					d.experts = append(d.experts, it)
				}
				continue
			}
			switch ev := e.(type) {
			case string:
				d.fields[k] = append(d.fields[k], ev)
			case []any:
				for _, s := range ev {
					if str, ok := s.(string); ok {
						d.fields[k] = append(d.fields[k], str)
					} else {
						walk(s, d)
					}
				}
			default:
				walk(ev, d)
			}
		}
	}
}

func asList(v any) []any {
	if l, ok := v.([]any); ok {
		return l
	}
	return []any{v}
}

// tsharkJSON decodes file with crem.lua and returns each frame's fields and expert items, in
// frame order.
func tsharkJSON(t *testing.T, tshark, file string, opts ...string) []decoded {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	args := append([]string{"-X", "lua_script:crem.lua", "-r", file, "-T", "json", "--no-duplicate-keys"}, opts...)
	cmd := exec.CommandContext(ctx, tshark, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("tshark %v: %v\n%s", args, err, stderr.Bytes())
	}
	var pkts []struct {
		Source struct {
			Layers map[string]any `json:"layers"`
		} `json:"_source"`
	}
	if err := json.Unmarshal(out, &pkts); err != nil {
		t.Fatalf("tshark JSON: %v\n%.2000s", err, out)
	}
	var res []decoded
	for _, p := range pkts {
		d := decoded{fields: map[string][]string{}}
		walk(p.Source.Layers, &d)
		res = append(res, d)
	}
	return res
}

// writeUDP writes payloads as UDP datagrams to dst into a classic pcap file.
func writeUDP(t *testing.T, dst netip.AddrPort, payloads [][]byte) string {
	t.Helper()
	var buf bytes.Buffer
	w, err := capture.NewWriter(&buf)
	if err != nil {
		t.Fatal(err)
	}
	hdr := capture.FrameHeader{Src: netip.MustParseAddrPort("192.0.2.1:40000"), Dst: dst}
	at := time.Unix(1_800_000_000, 0)
	for i, b := range payloads {
		if err := w.WriteUDP(at.Add(time.Duration(i)*time.Millisecond), hdr, b); err != nil {
			t.Fatal(err)
		}
	}
	return writeFile(t, "crafted.pcap", buf.Bytes())
}

func encode(t *testing.T, m wire.Message) []byte {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatalf("%v: %v", m.Type(), err)
	}
	return b
}

// setLength rewrites the Length field of a CREM message.
func setLength(b []byte, n int) []byte {
	binary.BigEndian.PutUint16(b[2:], uint16(n))
	return b
}

// TestExpertInfoMalformedCREMSection5 crafts malformed CREM messages (the draft's message
// formats: Version, Type, Length, the fields of each type, Entry Count at most 16) into a pcap
// with package capture, sent to the CREM port: tshark reports each problem as expert info of
// group Malformed and severity Error under its own name, the filter crem.malformed finds every
// malformed message, and `tshark -z expert` lists them. A well-formed message has none.
func TestExpertInfoMalformedCREMSection5(t *testing.T) {
	tshark := testenv.Tshark(t)
	msgs := messages(t)
	close := func() []byte { return encode(t, &wire.Close{FlowID: 1, Reason: wire.ReasonNormal}) }
	cases := []struct {
		name string
		b    []byte
		want []string // expert names; none for a well-formed message
	}{
		{"well-formed CLOSE", close(), nil},
		{"Version 2", func() []byte { b := close(); b[0] = 0x29; return b }(), []string{"crem.bad_version"}},
		{"Type 12", func() []byte { b := close(); b[0] = 0x1c; return b }(), []string{"crem.unknown_type"}},
		{"header cut", []byte{0x19, 0, 0, 5, 0}, []string{"crem.short"}},
		{"Length beyond the datagram", setLength(close(), 20), []string{"crem.length_mismatch"}},
		{"Length short of the datagram", append(close(), 0, 0, 0, 0), []string{"crem.length_mismatch"}},
		{"octets after the fields", setLength(append(close(), 0, 0, 0, 0), 16), []string{"crem.trailing"}},
		{"LOSS_REPORT cut", setLength(encode(t, msgs[6])[:20], 20), []string{"crem.short"}},
		{"Entry Count 17", func() []byte { b := encode(t, msgs[7]); b[9] = 17; return b }(),
			[]string{"crem.too_many_entries", "crem.short"}},
		// The one hop entry starts at 24 (header 8, 4 octets, IPv4 addresses 8, Flow Label 4):
		// its PSN Count is octet 41.
		{"PSN Count beyond the message", func() []byte { b := encode(t, msgs[7]); b[41] = 5; return b }(),
			[]string{"crem.psn_count_beyond"}},
		{"Range Count beyond the message", func() []byte {
			b := encode(t, &wire.RepairRequest{FlowID: 1, RangeForm: true, RequestID: 7, Ranges: []psn.Range{{Start: 100, Count: 3}}})
			binary.BigEndian.PutUint16(b[10:], 3)
			return b
		}(), []string{"crem.range_count_beyond"}},
		{"Symbol Length beyond the message", func() []byte {
			b := encode(t, msgs[0])
			binary.BigEndian.PutUint16(b[18:], binary.BigEndian.Uint16(b[18:])+4)
			return b
		}(), []string{"crem.symbol_length_mismatch"}},
		{"HELLO with AF 5", func() []byte { b := encode(t, msgs[1]); b[9] = 5; return b }(), []string{"crem.bad_field"}},
		{"REPAIR with k 0", func() []byte { b := encode(t, msgs[0]); b[10] = 0; return b }(), []string{"crem.bad_field"}},
	}
	var payloads [][]byte
	for _, c := range cases {
		payloads = append(payloads, c.b)
	}
	file := writeUDP(t, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), cremPort), payloads)
	frames := tsharkJSON(t, tshark, file, "-o", "crem.port:50123")
	if len(frames) != len(cases) {
		t.Fatalf("tshark decoded %d frames, want %d", len(frames), len(cases))
	}
	malformed := 0
	for i, c := range cases {
		d := frames[i]
		if len(d.fields["crem.version"]) == 0 {
			t.Errorf("%s: not dissected as CREM", c.name)
			continue
		}
		for _, w := range c.want {
			if !d.has(w) {
				t.Errorf("%s: no expert %s; experts %+v", c.name, w, d.experts)
			}
		}
		for _, e := range d.experts {
			if e.group != groupMalformed || e.severity != severityError {
				t.Errorf("%s: expert %s has group %#x severity %#x, want Malformed/Error", c.name, e.name, e.group, e.severity)
			}
			if !strings.HasPrefix(e.name, "crem.") {
				t.Errorf("%s: expert %q is not CREM's", c.name, e.name)
			}
		}
		if len(c.want) == 0 && len(d.experts) != 0 {
			t.Errorf("%s: well-formed message has experts %+v", c.name, d.experts)
		}
		if got := len(d.fields["crem.malformed"]) > 0; got != (len(c.want) > 0) {
			t.Errorf("%s: crem.malformed present %v, want %v (%q)", c.name, got, len(c.want) > 0, d.fields["crem.malformed"])
		}
		if len(c.want) > 0 {
			malformed++
		}
	}

	// The display filter and the expert statistics find them.
	out, err := exec.Command(tshark, "-X", "lua_script:crem.lua", "-o", "crem.port:50123", "-r", file,
		"-Y", "crem.malformed", "-T", "fields", "-e", "frame.number").Output()
	if err != nil {
		t.Fatal(err)
	}
	if n := len(strings.Fields(string(out))); n != malformed {
		t.Errorf("-Y crem.malformed finds %d frames, want %d", n, malformed)
	}
	out, err = exec.Command(tshark, "-X", "lua_script:crem.lua", "-o", "crem.port:50123", "-r", file,
		"-q", "-z", "expert,error").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Errors", "Malformed", "CREM", "Entry Count 17 exceeds 16", "Version 2"} {
		if !strings.Contains(string(out), w) {
			t.Errorf("tshark -z expert does not list %q:\n%s", w, out)
		}
	}
}

// extendedACK encodes an RC ACKNOWLEDGE (or ATOMIC ACKNOWLEDGE) with a T/C AETH.
func extendedACK(t *testing.T, op roce.Opcode, bthPSN psn.PSN, tc roce.TCAETH) []byte {
	t.Helper()
	p := roce.Packet{BTH: roce.BTH{OpCode: op, PKey: 0xffff, DestQP: 0x111, PSN: bthPSN},
		AETH: roce.AETH{Syndrome: 0x1f, MSN: 1}, Headers: roce.HasTCAETH, TCAETH: tc,
		AtomicAckETH: roce.AtomicAckETH{OrigRemData: 0x0102030405060708}}
	b, err := p.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestExpertInfoTCAETHRULINGST1: crafted extended ACKs on UDP port 4791. A well-formed one
// gets the tcaeth tree with its gaps (expert Note, group Sequence) and nothing else; SegmentNum
// outside 1..4 and Seg fields out of order (T3) and an ACK whose length is neither plain nor
// extended (T2) are Malformed/Error; non-zero padding (T1) and a BTH PSN other than Last Finished
// PSN (T2) are Protocol/Warning. An ATOMIC ACKNOWLEDGE carries its Atomic ACK ETH after the
// fragment.
func TestExpertInfoTCAETHRULINGST1(t *testing.T) {
	tshark := testenv.Tshark(t)
	good := roce.TCAETH{LastFinished: 100, NumSegs: 2, Segs: [3]roce.Segment{{Left: 103, Right: 105}, {Left: 110, Right: 120}}}
	plain := func() []byte {
		p := roce.Packet{BTH: roce.BTH{OpCode: roce.OpAcknowledge, PKey: 0xffff, DestQP: 0x111, PSN: 100},
			AETH: roce.AETH{Syndrome: 0x1f, MSN: 1}}
		b, err := p.Append(nil)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	cases := []struct {
		name string
		b    []byte
		want map[string][2]uint64 // expert -> group, severity
	}{
		{"plain ACK", plain(), nil},
		{"well-formed", extendedACK(t, roce.OpAcknowledge, 100, good),
			map[string][2]uint64{"tcaeth.lost": {groupSequence, severityNote}}},
		{"SegmentNum 5", func() []byte { b := extendedACK(t, roce.OpAcknowledge, 100, good); b[16+2] = 5; return b }(),
			map[string][2]uint64{"tcaeth.bad_segment_num": {groupMalformed, severityError}}},
		{"Seg2 not after Seg1", func() []byte {
			b := extendedACK(t, roce.OpAcknowledge, 100, good)
			copy(b[16+12:16+15], []byte{0, 0, 104})
			return b
		}(), map[string][2]uint64{"tcaeth.bad_order": {groupMalformed, severityError}}},
		{"padding not zero", func() []byte { b := extendedACK(t, roce.OpAcknowledge, 100, good); b[16+31] = 1; return b }(),
			map[string][2]uint64{"tcaeth.nonzero": {groupProtocol, severityWarn}, "tcaeth.lost": {groupSequence, severityNote}}},
		{"BTH PSN not Last Finished", extendedACK(t, roce.OpAcknowledge, 99, good),
			map[string][2]uint64{"tcaeth.psn_mismatch": {groupProtocol, severityWarn}, "tcaeth.lost": {groupSequence, severityNote}}},
		{"30-octet fragment", func() []byte {
			b := plain()
			return append(append(b[:16:16], make([]byte, 30)...), b[16:]...)
		}(), map[string][2]uint64{"tcaeth.ack_length": {groupMalformed, severityError}}},
		{"ATOMIC ACKNOWLEDGE", extendedACK(t, roce.OpAtomicAcknowledge, 100, good),
			map[string][2]uint64{"tcaeth.lost": {groupSequence, severityNote}}},
	}
	var payloads [][]byte
	for _, c := range cases {
		payloads = append(payloads, c.b)
	}
	file := writeUDP(t, netip.AddrPortFrom(netip.MustParseAddr("192.0.2.2"), roce.UDPPort), payloads)
	frames := tsharkJSON(t, tshark, file)
	if len(frames) != len(cases) {
		t.Fatalf("tshark decoded %d frames, want %d", len(frames), len(cases))
	}
	for i, c := range cases {
		d := frames[i]
		var got []string
		for _, e := range d.experts {
			if e.name == "_ws.lua.error" {
				t.Fatalf("%s: Lua error in crem.lua: %+v", c.name, e)
			}
			if !strings.HasPrefix(e.name, "tcaeth.") {
				continue // the InfiniBand dissector's own
			}
			got = append(got, e.name)
			w, ok := c.want[e.name]
			if !ok {
				t.Errorf("%s: unexpected expert %s", c.name, e.name)
			} else if e.group != w[0] || e.severity != w[1] {
				t.Errorf("%s: expert %s group %#x severity %#x, want %#x %#x", c.name, e.name, e.group, e.severity, w[0], w[1])
			}
		}
		for w := range c.want {
			if !slices.Contains(got, w) {
				t.Errorf("%s: no expert %s; experts %+v", c.name, w, d.experts)
			}
		}
	}
	// The well-formed fragment's fields, gaps 101-102 and 106-109.
	d := frames[1]
	for f, w := range map[string]string{"tcaeth.segment_num": "3", "tcaeth.last_finished_psn": "100",
		"tcaeth.seg_left": "103,110", "tcaeth.seg_right": "105,120", "tcaeth.lost_first": "101,106",
		"tcaeth.lost_last": "102,109", "tcaeth.lost_count": "2,4", "tcaeth.lost_total": "6"} {
		if got := strings.Join(d.fields[f], ","); got != w {
			t.Errorf("well-formed %s = %q, want %q", f, got, w)
		}
	}
	if got := d.fields["tcaeth.seg_left"]; len(got) != 2 {
		t.Errorf("well-formed: %d Seg Left fields, want the 2 in use", len(got))
	}
	if got := frames[0].fields["tcaeth.segment_num"]; len(got) != 0 {
		t.Errorf("plain ACK: tcaeth tree %v", got)
	}
	if got := strings.Join(frames[7].fields["tcaeth.atomic_original_data"], ","); got != "0x0102030405060708" {
		t.Errorf("ATOMIC ACKNOWLEDGE: tcaeth.atomic_original_data %q", got)
	}
}
