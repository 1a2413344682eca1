package udpproxy

import (
	"math/rand/v2"

	"github.com/crem-project/crem/psn"
	"github.com/crem-project/crem/wire"
)

// maxForgedBlocks bounds the blocks the forger remembers having forged; beyond it, it forgets
// them all and starts over (a block forged twice is still one a CRF must resist).
const maxForgedBlocks = 1 << 16

// forger is an on-path attacker, for the CRF's defence of its block definitions (protocol
// notes E66-E68): ahead of the first REPAIR of each block the forward direction carries, it
// injects a REPAIR from the same client (so from the address the CRF bound) with the same
// Flow ID and Config ID that defines the block another way, by turns: one present position
// cleared, the next block's with half its k (sent before that block's sources), half its k;
// with random symbol octets. Owned by the forward direction's loop.
type forger struct {
	rng  *rand.Rand
	seen map[forgedBlock]struct{}
	n    uint64
}

type forgedBlock struct {
	flow  uint32
	start psn.PSN
}

func newForger(seed uint64) *forger {
	return &forger{rng: rand.New(rand.NewPCG(seed, 0x666f726765)), seen: map[forgedBlock]struct{}{}}
}

// forge returns the forged REPAIR to send ahead of datagram b, or nil when b is not the first
// source-carrying REPAIR of a block.
func (f *forger) forge(b []byte) []byte {
	if len(b) == 0 || b[0]&0x0f != byte(wire.TypeRepair) {
		return nil
	}
	m, err := wire.ParseRepair(b)
	if err != nil || m.Info || m.Retx || m.K < 2 {
		return nil
	}
	key := forgedBlock{m.FlowID, m.BlockStartPSN}
	if _, ok := f.seen[key]; ok {
		return nil
	}
	if len(f.seen) >= maxForgedBlocks {
		clear(f.seen)
	}
	f.seen[key] = struct{}{}
	f.n++
	switch f.n % 3 {
	case 0:
		m.K /= 2
		m.Present = m.Present.And(psn.FirstK(int(m.K)))
	case 1:
		m.Present.Clear(f.rng.IntN(int(m.K)))
	case 2:
		m.BlockStartPSN = m.BlockStartPSN.Add(int(m.K))
		m.K /= 2
		m.Present = m.Present.And(psn.FirstK(int(m.K)))
	}
	m.Symbol = make([]byte, len(m.Symbol)) // ParseRepair's aliases the genuine datagram
	for i := range m.Symbol {
		m.Symbol[i] = byte(f.rng.Uint32())
	}
	out, err := m.Append(nil)
	if err != nil {
		return nil
	}
	return out
}
