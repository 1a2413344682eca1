package main

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// runWireCLI runs crem in process and returns exit status, standard output and standard error.
func runWireCLI(t *testing.T, stdin string, args ...string) (int, string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	code := run(args, stdio{in: strings.NewReader(stdin), out: &out, err: &errb})
	return code, out.String(), errb.String()
}

// decodeJSON decodes the single JSON object crem printed, keeping numbers exact.
func decodeJSON(t *testing.T, out string) map[string]any {
	t.Helper()
	if strings.Count(out, "\n") != 1 || !strings.HasSuffix(out, "\n") {
		t.Fatalf("output is not one line: %q", out)
	}
	dec := json.NewDecoder(strings.NewReader(out))
	dec.UseNumber()
	var obj map[string]any
	if err := dec.Decode(&obj); err != nil {
		t.Fatalf("output is not a JSON object: %v\n%s", err, out)
	}
	return obj
}

// wantFields compares selected fields; numbers are given as int and compared exactly.
func wantFields(t *testing.T, obj map[string]any, want map[string]any) {
	t.Helper()
	for k, w := range want {
		got, ok := obj[k]
		if !ok {
			t.Errorf("field %q missing", k)
			continue
		}
		if n, isNum := got.(json.Number); isNum {
			got = string(n)
			switch v := w.(type) {
			case int:
				w = strconv.Itoa(v)
			case uint64:
				w = strconv.FormatUint(v, 10)
			}
		}
		if got != w {
			t.Errorf("%s = %v (%T), want %v (%T)", k, got, got, w, w)
		}
	}
}

func mustHex(t *testing.T, m wire.Message) string {
	t.Helper()
	b, err := m.Append(nil)
	if err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}

// The draft's Appendix REPAIR message decodes to the fields the Appendix names.
func TestWireDecodeAppendix(t *testing.T) {
	code, out, errs := runWireCLI(t, "", "wire", "decode", strings.ReplaceAll(wireExampleHex, " ", ""))
	if code != 0 || errs != "" {
		t.Fatalf("exit %d, stderr %q", code, errs)
	}
	obj := decodeJSON(t, out)
	wantFields(t, obj, map[string]any{
		"version": 1, "type": "REPAIR", "type_code": 1, "length": 44, "flow_id": 48879,
		"config_id": 1, "scheme": 1, "k": 4, "repair_index": 2, "block_start_psn": 4096,
		"repair_session_id": 7, "symbol_length": 16, "retx": true, "last": false, "info": false,
		"present_bitmap": "f0000000", "lost_source_bitmap": "e0000000",
		"symbol": "00354fdf6d4b40b57e5c400000000000",
	})
}

// Hex from standard input, with whitespace and newlines, or spread over several arguments,
// gives the same object.
func TestWireDecodeInputForms(t *testing.T) {
	_, want, _ := runWireCLI(t, "", "wire", "decode", strings.ReplaceAll(wireExampleHex, " ", ""))
	spaced := strings.ReplaceAll(wireExampleHex, " 00 07 ", "\n00 07\t")
	for name, args := range map[string][]string{
		"stdin":     {"wire", "decode"},
		"arguments": append([]string{"wire", "decode"}, strings.Fields(wireExampleHex)...),
		"upper":     {"wire", "decode", strings.ToUpper(wireExampleHex)},
	} {
		code, out, errs := runWireCLI(t, spaced+"\n", args...)
		if code != 0 || out != want {
			t.Errorf("%s: exit %d out %q err %q, want %q", name, code, out, errs, want)
		}
	}
	code, out, _ := runWireCLI(t, "", "wire", "decode", "--indent", wireExampleHex)
	if code != 0 || !strings.Contains(out, "\n  \"flow_id\": 48879,\n") {
		t.Errorf("--indent: exit %d\n%s", code, out)
	}
}

// Each of the nine types decodes with its fields named in snake_case after the draft.
func TestWireDecodeEveryType(t *testing.T) {
	v6a, v6b := netip.MustParseAddr("2001:db8::1"), netip.MustParseAddr("2001:db8::2")
	v4a, v4b := netip.MustParseAddr("192.0.2.1"), netip.MustParseAddr("192.0.2.2")
	caps := wire.Capabilities{FlowKind: wire.FlowKindRoCEv2, Schemes: 0x7, MaxK: 64, MaxM: 8, MaxT: 4130, RDMAMTU: 4096}
	snake := regexp.MustCompile(`^[a-z][a-z0-9_]*$`)
	for _, tc := range []struct {
		m    wire.Message
		want map[string]any
	}{
		{&wire.Repair{FlowID: 3, Info: true, Last: true, Scheme: 1, K: 40, BlockStartPSN: 0xabcdef, Present: psn.FirstK(33)},
			map[string]any{"type": "REPAIR", "info": true, "last": true, "retx": false, "k": 40, "symbol_length": 0,
				"symbol": "", "present_bitmap": "ffffffff80000000", "block_start_psn": 0xabcdef, "scheme_name": "Cauchy Reed-Solomon"}},
		{&wire.Hello{Capabilities: caps, SenderNonce: 0xfedcba9876543210, Source: v6a, Destination: v6b, FlowLabel: 0x123},
			map[string]any{"type": "HELLO", "flow_id": 0, "flow_kind": 1, "flow_kind_name": "RoCEv2", "af": 6,
				"supported_schemes": 7, "max_k": 64, "max_m": 8, "max_t": 4130, "rdma_mtu": 4096,
				"sender_nonce": uint64(0xfedcba9876543210), "source_address": "2001:db8::1",
				"destination_address": "2001:db8::2", "flow_label": 0x123, "length": 64}},
		{&wire.Hello{Capabilities: caps, Source: v4a, Destination: v4b},
			map[string]any{"type": "HELLO", "af": 4, "source_address": "192.0.2.1", "length": 40}},
		{&wire.HelloAck{FlowID: 77, Capabilities: caps, AF: wire.AF4, SenderNonce: 5, MaxOpenBlocks: 64},
			map[string]any{"type": "HELLO_ACK", "type_code": 3, "flow_id": 77, "sender_nonce": 5, "max_open_blocks": 64, "af": 4}},
		{&wire.ParamUpdate{FlowID: 77, ConfigID: 2, Scheme: 1, K: 32, M: 4, T: 1058, EffectivePSN: 0x10},
			map[string]any{"type": "PARAM_UPDATE", "config_id": 2, "k": 32, "m": 4, "t": 1058, "effective_psn": 16}},
		{&wire.ParamAck{FlowID: 77, ConfigID: 2, Status: 1},
			map[string]any{"type": "PARAM_ACK", "status": 1, "status_name": "unsupported scheme"}},
		{&wire.RepairRequest{FlowID: 77, Fallback: true, RequestID: 9, ConfigID: 1, Scheme: 1, K: 4, RepairsHeld: 2,
			BlockStartPSN: 0x1000, SuggestedM: 1, Lost: psn.Bitmap{0xe0000000}},
			map[string]any{"type": "REPAIR_REQUEST", "ranges": false, "fallback": true, "request_id": 9,
				"repairs_held": 2, "suggested_m": 1, "lost_source_bitmap": "e0000000", "block_start_psn": 4096}},
		{&wire.RepairRequest{FlowID: 77, RangeForm: true, RequestID: 10, Ranges: []psn.Range{{Start: 0xfffffe, Count: 3}}},
			map[string]any{"type": "REPAIR_REQUEST", "ranges": true, "fallback": false, "request_id": 10, "range_count": 1}},
		{&wire.LossReport{FlowID: 77, IntervalUS: 1000, Expected: 100, Received: 97, Restored: 2, IncompleteBlocks: 1,
			CEMarked: 4, RepairsReceived: 12, RepairsCEMarked: 1},
			map[string]any{"type": "LOSS_REPORT", "interval_us": 1000, "expected": 100, "received": 97, "restored": 2,
				"incomplete_blocks": 1, "ce_marked": 4, "repairs_received": 12, "repairs_ce_marked": 1}},
		{&wire.PathReport{Truncated: true, Method: 3, Source: v4a, Destination: v4b, FlowLabel: 0x11,
			Hops: []wire.HopEntry{{NodeID: 1, MarkingPeriodNumber: 2, LostCount: 3, QueueDelayChangeUS: -4, Cause: 1,
				DroppedPSNs: []psn.PSN{0x1001}}}},
			map[string]any{"type": "PATH_REPORT", "truncated": true, "method": 3, "entry_count": 1, "af": 4,
				"destination_address": "192.0.2.2", "flow_label": 0x11}},
		{&wire.Close{FlowID: 77, Reason: wire.ReasonCircuitBreaker},
			map[string]any{"type": "CLOSE", "type_code": 9, "reason": 4, "reason_name": "circuit breaker"}},
	} {
		t.Run(tc.m.Type().String(), func(t *testing.T) {
			code, out, errs := runWireCLI(t, "", "wire", "decode", mustHex(t, tc.m))
			if code != 0 {
				t.Fatalf("exit %d: %s", code, errs)
			}
			obj := decodeJSON(t, out)
			wantFields(t, obj, tc.want)
			for k := range obj {
				if !snake.MatchString(k) {
					t.Errorf("key %q is not snake_case", k)
				}
			}
		})
	}
	// The nested arrays.
	_, out, _ := runWireCLI(t, "", "wire", "decode", mustHex(t, &wire.PathReport{Method: 3, Source: v4a, Destination: v4b,
		Hops: []wire.HopEntry{{NodeID: 1, MarkingPeriodNumber: 2, LostCount: 3, QueueDelayChangeUS: -4, Cause: 1,
			DroppedPSNs: []psn.PSN{0x1001, 0xffffff}}, {NodeID: 9}}}))
	for _, want := range []string{
		`"hop_entries":[{"node_id":1,"marking_period_number":2,"lost_count":3,"queue_delay_change_us":-4,"cause":1,"cause_name":"congestion","psn_count":2,"dropped_psns":[4097,16777215]},`,
		`"psn_count":0,"dropped_psns":[]}]`,
	} {
		if !strings.Contains(out, want) {
			t.Errorf("PATH_REPORT output lacks %s\n%s", want, out)
		}
	}
	_, out, _ = runWireCLI(t, "", "wire", "decode", mustHex(t, &wire.RepairRequest{RangeForm: true, RequestID: 10,
		Ranges: []psn.Range{{Start: 0xfffffe, Count: 3}, {Start: 5, Count: 255}}}))
	if want := `"range_count":2,"psn_ranges":[{"start_psn":16777214,"count":3},{"start_psn":5,"count":255}]`; !strings.Contains(out, want) {
		t.Errorf("REPAIR_REQUEST output lacks %s\n%s", want, out)
	}
}

// Malformed input, unknown Version or Type and bad hex: exit status 1, nothing on standard
// output, exactly one line on standard error that names the problem.
func TestWireDecodeErrors(t *testing.T) {
	appendix := strings.ReplaceAll(wireExampleHex, " ", "")
	for _, tc := range []struct {
		name, hex, want string
	}{
		{"k 0", appendix[:20] + "00" + appendix[22:], "wire: REPAIR: k: 0 is out of range 1..255"},
		{"truncated", appendix[:len(appendix)-2], "wire: REPAIR: Length: 44 exceeds the datagram's 43 octets"},
		{"unknown version", "2" + appendix[1:], "wire: unknown Version 2: discard silently"},
		{"unknown type", "1c" + appendix[2:], "wire: unknown Type 12: discard silently"},
		{"request ID 0", "16 10 0010 00000001 0000 0001 00000504", "wire: REPAIR_REQUEST: Request ID: 0 is never a Request ID (RULINGS C4)"},
		{"bad hex digit", "11zz", "bad hex: invalid byte"},
		{"odd hex", "118", "bad hex: odd length"},
		{"empty", "   ", "no hex given"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, out, errs := runWireCLI(t, tc.hex, "wire", "decode")
			if code != 1 || out != "" {
				t.Fatalf("exit %d, stdout %q; want 1 and nothing", code, out)
			}
			if strings.Count(errs, "\n") != 1 || !strings.HasSuffix(errs, "\n") {
				t.Fatalf("stderr is not one line: %q", errs)
			}
			if !strings.HasPrefix(errs, "crem wire decode: ") || !strings.Contains(errs, tc.want) {
				t.Fatalf("stderr %q, want it to contain %q", errs, tc.want)
			}
		})
	}
}

func TestWireHelp(t *testing.T) {
	code, out, _ := runWireCLI(t, "", "wire", "--help")
	if code != 0 || !strings.Contains(out, "decode") || !strings.Contains(out, "REPAIR_REQUEST") {
		t.Fatalf("wire --help: exit %d\n%s", code, out)
	}
	code, out, errs := runWireCLI(t, "", "wire", "decode", "--help")
	help := out + errs
	if code != 0 || !strings.Contains(help, "crem wire decode [--indent] [HEX...]") || !strings.Contains(help, "snake_case") {
		t.Fatalf("wire decode --help: exit %d\n%s", code, help)
	}
	// The example the help shows decodes.
	if code, _, errs := runWireCLI(t, "", "wire", "decode", wireExampleHex); code != 0 {
		t.Fatalf("help example: %s", errs)
	}
	if code, _, _ := runWireCLI(t, "", "wire"); code != 2 {
		t.Fatalf("wire without subcommand: exit %d, want 2", code)
	}
	if code, _, errs := runWireCLI(t, "", "wire", "encode"); code != 2 || !strings.Contains(errs, `unknown subcommand "encode"`) {
		t.Fatalf("wire encode: exit %d %q", code, errs)
	}
}
