// Package capture reads and writes packet capture files and takes frames apart down to UDP.
//
// It reads classic pcap (either byte order, microsecond or nanosecond timestamps) and pcapng
// (any number of sections and interfaces, per-interface timestamp resolution), with Ethernet,
// raw IP and Linux cooked (SLL, SLL2) link types. DecodeUDP walks a frame through Ethernet,
// any number of VLAN tags (802.1Q, 802.1ad), IPv4 with options or IPv6 with extension headers,
// and UDP, and hands back the raw IP header, the UDP header and the UDP payload, aliasing the
// frame. Writer records UDP datagrams as Ethernet frames in classic pcap, so the project's
// tools can leave captures that tshark and Wireshark open.
//
// The package knows no protocol above UDP. It is written here rather than taken from gopacket's
// pcapgo because pcapgo's package also holds live capture, which pulls netlink and x/net into
// every build, and the two file formats are small.
package capture
