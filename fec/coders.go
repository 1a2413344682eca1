package fec

import (
	"fmt"

	"github.com/klauspost/reedsolomon"
)

// coderKey names a fused coder: Repair Indices first..first+n-1 over k positions.
type coderKey struct{ k, first, n int }

type coderEntry struct {
	key  coderKey
	enc  reedsolomon.Encoder
	used uint64
}

// coders is a small least-recently-used cache of klauspost encoders built with the CREM
// Cauchy rows. Building one costs allocations and a matrix setup, so a sender keeps the few
// configurations it is using; the bound keeps a flow that changes k often from growing it.
type coders struct {
	max     int
	tick    uint64
	entries []coderEntry
}

func (c *coders) get(key coderKey) (reedsolomon.Encoder, error) {
	c.tick++
	for i := range c.entries {
		if c.entries[i].key == key {
			c.entries[i].used = c.tick
			return c.entries[i].enc, nil
		}
	}
	idx := make([]int, key.n)
	for r := range idx {
		idx[r] = key.first + r
	}
	rows, err := CauchyRows(key.k, idx...)
	if err != nil {
		return nil, err
	}
	// One goroutine per block: a gateway spreads flows over the cores already, and a split
	// inside a block only pays off for symbols far larger than an RDMA packet.
	enc, err := reedsolomon.New(key.k, key.n, reedsolomon.WithCustomMatrix(rows),
		reedsolomon.WithMaxGoroutines(1), reedsolomon.WithInversionCache(false))
	if err != nil {
		return nil, fmt.Errorf("fec: building the coder for k = %d, indices %d..%d: %w", key.k, key.first, key.first+key.n-1, err)
	}
	e := coderEntry{key: key, enc: enc, used: c.tick}
	if len(c.entries) < c.max {
		c.entries = append(c.entries, e)
		return enc, nil
	}
	old := 0
	for i := range c.entries {
		if c.entries[i].used < c.entries[old].used {
			old = i
		}
	}
	c.entries[old] = e
	return enc, nil
}
