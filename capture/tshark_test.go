package capture

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Writer, against an independent decoder: tshark reads what Writer writes and sees the same
// VLAN IDs, addresses, ports, lengths, IPv4 flags and TTL, IPv6 traffic class and flow label,
// with the IPv4 header checksum and the IPv6 UDP checksum good.
func TestTsharkReadsWrittenCaptureSection6(t *testing.T) {
	bin, err := exec.LookPath("tshark")
	if err != nil {
		t.Skip("tshark is not installed (apt-get install -y tshark); the independent-decoder check is skipped")
	}
	path := filepath.Join(t.TempDir(), "written.pcap")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWriter(f)
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(1700000000, 0)
	// A port other than 4791 keeps tshark's dissection at UDP.
	dst4, dst6 := v4B.Addr(), v6B.Addr()
	frames := []FrameHeader{
		{SrcMAC: macA, DstMAC: macB, Src: v4A, Dst: netipPort(dst4, 9999), VLANs: []uint16{100, 200}, ID: 7, TTL: 33},
		{SrcMAC: macA, DstMAC: macB, Src: v6A, Dst: netipPort(dst6, 9999), TOS: 0xb8, FlowLabel: 0x12345},
	}
	for i, h := range frames {
		if err := w.WriteUDP(t0, h, []byte(strings.Repeat("x", 10+i))); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin, "-r", path, "-o", "ip.check_checksum:TRUE", "-o", "udp.check_checksum:TRUE",
		"-T", "fields", "-E", "separator=|", "-E", "aggregator=,",
		"-e", "ieee8021ad.id", "-e", "vlan.id", "-e", "ip.src", "-e", "ipv6.src", "-e", "udp.srcport", "-e", "udp.dstport", "-e", "udp.length",
		"-e", "ip.flags.df", "-e", "ip.id", "-e", "ip.ttl", "-e", "ip.checksum.status",
		"-e", "ipv6.tclass", "-e", "ipv6.flow", "-e", "udp.checksum.status").Output()
	if err != nil {
		t.Fatalf("tshark: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(lines) != 2 {
		t.Fatalf("tshark printed %q", out)
	}
	v4 := strings.Split(lines[0], "|")
	v6 := strings.Split(lines[1], "|")
	check := func(name, got string, want ...string) {
		t.Helper()
		for _, w := range want {
			if got == w {
				return
			}
		}
		t.Errorf("%s: tshark %q, want %q", name, got, want)
	}
	v4, v6 = v4[1:], v6[1:]
	check("802.1ad S-tag and 802.1Q C-tag", lines[0][:strings.Index(lines[0], "|")]+"/"+v4[0], "100/200")
	check("IPv4 source", v4[1], "10.0.0.1")
	check("UDP ports", v4[3]+"/"+v4[4], "49152/9999")
	check("UDP length", v4[5], "18")
	check("DF", v4[6], "1", "True")
	check("Identification", v4[7], "0x0007", "7")
	check("TTL", v4[8], "33")
	check("IPv4 checksum status", v4[9], "1", "Good") // 1 = good
	check("IPv6 source", v6[2], "2001:db8::1")
	check("IPv6 traffic class", v6[10], "0x000000b8", "0xb8", "184")
	check("IPv6 flow label", v6[11], "0x12345", "0x012345", "0x00012345", "74565")
	check("IPv6 UDP checksum status", v6[12], "1", "Good")
}
