package gateway

// sendTun sends one whole IPv4 packet on through the raw socket (tun mode).
func (sh *shard) sendTun(b []byte) {
	g := sh.g
	if g.pcap != nil {
		g.pcap.recordIP(b)
	}
	if err := g.tun.send(b); err != nil {
		g.c.writeErrors.Add(1)
		return
	}
	g.c.tx[kindTun].Add(1)
	g.c.txBytes[kindTun].Add(uint64(len(b)))
}
