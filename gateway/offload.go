package gateway

// offloadCounters adds what UDP segmentation offload did, over the gateway's sockets, to the
// gateway's counters (docs/gateway.md, relay.offload).
func (g *Gateway) offloadCounters(m map[string]uint64) {
	var gsoSends, gsoDatagrams, gsoFallbacks, gsoDisabled, groReceives, groDatagrams, groCopied uint64
	for _, s := range []*sock{g.crem, g.local, g.wan} {
		if s == nil {
			continue
		}
		o := &s.off
		gsoSends += o.gsoSends.Load()
		gsoDatagrams += o.gsoDatagrams.Load()
		gsoFallbacks += o.gsoFallbacks.Load()
		gsoDisabled += o.gsoDisabled.Load()
		groReceives += o.groReceives.Load()
		groDatagrams += o.groDatagrams.Load()
		groCopied += o.groCopied.Load()
	}
	m["gso_sends"], m["gso_datagrams"], m["gso_fallbacks"], m["gso_disabled"] = gsoSends, gsoDatagrams, gsoFallbacks, gsoDisabled
	m["gro_receives"], m["gro_datagrams"], m["gro_copied"] = groReceives, groDatagrams, groCopied
	m["gro_buffers_allocated"], m["gro_buffers_released"] = g.gro.allocated.Load(), g.gro.released.Load()
}
