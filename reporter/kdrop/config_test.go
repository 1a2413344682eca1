package kdrop

import (
	"strings"
	"testing"
	"time"

	"github.com/crem-project/crem/wire"
)

// TestReasonsResolvedWithTheKernelsTable: configured reason names resolve to the kernel's
// numbers with their causes; a name the kernel lacks is refused when configured, skipped when
// it is one of the defaults (a newer kernel's); numbers of 256 and up are refused.
func TestReasonsResolvedWithTheKernelsTable(t *testing.T) {
	kernel := map[string]uint32{"QDISC_DROP": 64, "QDISC_OVERLIMIT": 65, "IP_CSUM": 14, "SUBSYS_X": 0x10001}
	r, err := FileConfig{CREMPort: 50000, Devices: []string{"eth1"}, Reasons: map[string]string{"qdisc_drop": "congestion",
		"SKB_DROP_REASON_IP_CSUM": "corruption"}}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	nums, causes, err := r.ReasonNumbers(kernel)
	if err != nil || len(nums) != 2 || causes[64] != wire.CauseCongestion || causes[14] != wire.CauseCorruption {
		t.Fatalf("%v %v %v", nums, causes, err)
	}
	r, _ = FileConfig{CREMPort: 50000, Devices: []string{"eth1"}, Reasons: map[string]string{"FQ_FLOW_LIMIT": "congestion"}}.Resolve()
	if _, _, err := r.ReasonNumbers(kernel); err == nil || !strings.Contains(err.Error(), "no drop reason FQ_FLOW_LIMIT") {
		t.Errorf("a configured reason the kernel lacks: %v", err)
	}
	r, _ = FileConfig{CREMPort: 50000, Devices: []string{"eth1"}, Reasons: map[string]string{"SUBSYS_X": "other"}}.Resolve()
	if _, _, err := r.ReasonNumbers(kernel); err == nil || !strings.Contains(err.Error(), "below 256") {
		t.Errorf("a reason above 255: %v", err)
	}
	r, _ = FileConfig{CREMPort: 50000, Devices: []string{"eth1"}}.Resolve()
	nums, causes, err = r.ReasonNumbers(kernel)
	if err != nil || len(nums) != 2 || causes[65] != wire.CauseCongestion {
		t.Errorf("defaults on a kernel with two of them: %v %v %v", nums, causes, err)
	}
	if _, _, err := r.ReasonNumbers(map[string]uint32{"IP_CSUM": 14}); err == nil {
		t.Error("defaults on a kernel with none of them: no error")
	}
}

// TestResolveFillsTheEnginesDefaults: an empty engine section takes the reporter engine's
// defaults (50us aggregation, 1 ms per flow, 2000 reports per second per device), udp_ports
// 4791; durations, ports, devices and the ring size are checked.
func TestResolveFillsTheEnginesDefaults(t *testing.T) {
	r, err := FileConfig{CREMPort: 50000, Devices: []string{"eth1"}, Aggregation: "100us",
		Routes: []RouteConfig{{Prefix: "10.1.0.0/16", CSF: "10.1.0.1"}}}.Resolve()
	if err != nil {
		t.Fatal(err)
	}
	if r.Engine.Aggregation != 100*time.Microsecond || len(r.Ports) != 1 || r.Ports[0] != 4791 || len(r.Engine.Routes) != 1 {
		t.Errorf("resolved %+v", r)
	}
	for _, bad := range []FileConfig{
		{CREMPort: 50000, Devices: []string{"eth1", "eth1"}},
		{CREMPort: 50000, Devices: []string{"eth1"}, UDPPorts: []uint16{0}},
		{CREMPort: 50000, Devices: []string{"eth1"}, FlowInterval: "-1ms"},
		{CREMPort: 50000, Devices: []string{"eth1"}, PathMTU: 500},
		{CREMPort: 50000, Devices: []string{"eth1"}, Source: "host"},
		{CREMPort: 50000, Devices: []string{"eth1"}, LogLevel: "loud"},
		{CREMPort: 50000, Devices: []string{"eth1"}, Routes: []RouteConfig{{Prefix: "10.1.0.0/16"}}},
	} {
		if _, err := bad.Resolve(); err == nil {
			t.Errorf("%+v: no error", bad)
		}
	}
}
