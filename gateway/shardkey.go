package gateway

import (
	"github.com/crem-project/crem/wire"
)

// qpShards spreads the flows of relay mode over the shards. Every datagram of relay mode runs
// between one pair of endpoints, so by its address pair each would go to one shard, whatever
// the shards. A protect rule that names both qp and reverse_qp names the two directions of one
// RC connection, whose pairing is then configured rather than learned (the learner needs to
// see every datagram of the pair, CM MADs included, on one node): the datagrams addressed to
// either QP, the HELLOs and PATH_REPORTs of their flows go to the shard of the pair, its lower
// QP modulo the shards, and everything else to the address pair's shard as before. The map is
// built once by New and only read after: the readers look it up without a lock.
type qpShards map[uint32]int

// newQPShards maps the QPs of the rules' configured pairs to shards, or returns nil: not relay
// mode, one shard, no pair, or pairs that share a QP across shards (everything then stays on
// the address pair's shard).
func newQPShards(r *resolved, shards int) qpShards {
	if r.mode != ModeRelay || shards <= 1 {
		return nil
	}
	m := qpShards{}
	for _, ru := range r.rules {
		if ru.qp == 0 || ru.reverseQP == 0 {
			continue
		}
		s := int(min(ru.qp, ru.reverseQP) % uint32(shards))
		a, aok := m[ru.qp]
		b, bok := m[ru.reverseQP]
		switch {
		case aok && bok && a != b:
			return nil
		case aok:
			s = a
		case bok:
			s = b
		}
		m[ru.qp], m[ru.reverseQP] = s, s
	}
	if len(m) == 0 {
		return nil
	}
	return m
}

// dataShard is the shard of a relayed RoCEv2 datagram (at least a BTH long).
func (g *Gateway) dataShard(b []byte) int {
	if g.qps != nil {
		if s, ok := g.qps[uint32(b[5])<<16|uint32(b[6])<<8|uint32(b[7])]; ok {
			return s
		}
	}
	return g.pairHash(g.cfg.localEP, g.cfg.remoteEP)
}

// flowShard is the shard of a relay-mode flow named by a HELLO or PATH_REPORT (its flow label
// holds the destination QP).
func (g *Gateway) flowShard(label uint32) (int, bool) {
	if g.qps == nil {
		return 0, false
	}
	s, ok := g.qps[label&0xffffff]
	return s, ok
}

// pathReportShard is the shard of a PATH_REPORT in relay mode: its flow's, when a pair names
// its QP; else the address pair's, which parses, maps and counts it (Node.reportKey).
func (g *Gateway) pathReportShard(b []byte) int {
	if g.qps != nil {
		if pr, ok := wire.PeekPathReportFlow(b); ok {
			if s, ok := g.flowShard(pr.FlowLabel); ok {
				return s
			}
		}
	}
	return g.pairHash(g.cfg.localEP, g.cfg.remoteEP)
}
