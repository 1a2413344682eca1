package conform

import "net/netip"

func netipAddrPort(a netip.Addr, port uint16) netip.AddrPort { return netip.AddrPortFrom(a, port) }
