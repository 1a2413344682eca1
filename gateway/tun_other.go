//go:build !linux

package gateway

import (
	"errors"
	"sync"
)

// tunPath is the transparent data path; it exists on Linux only.
type tunPath struct{ out [256]*tunQueue }

type tunQueue struct{ pkts []*pkt }

const tunBatch = 64

func openTun(r *resolved) (*tunPath, error) {
	return nil, &ConfigError{Key: "mode", Value: `"tun"`, Err: errors.New("mode tun needs Linux")}
}

func (t *tunPath) close()                          {}
func (t *tunPath) addCounters(m map[string]uint64) {}

func (t *tunPath) queue(idx int) *tunQueue {
	if t.out[idx] == nil {
		t.out[idx] = &tunQueue{}
	}
	return t.out[idx]
}

func (t *tunPath) sendBatch(q *tunQueue) (int, uint64, int) { return 0, 0, len(q.pkts) }

func (g *Gateway) tunPairLoop(run func(*sync.WaitGroup, func() error), waiters *sync.WaitGroup) error {
	return errors.New("gateway: mode tun needs Linux")
}
