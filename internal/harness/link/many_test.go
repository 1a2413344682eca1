package link

import (
	"fmt"
	"testing"
	"time"
)

// Many seeds at the worst loss the issue names (10 percent each way) with reordering: every
// mode completes every operation byte for byte.
func TestRandomTransfersManySeeds(t *testing.T) {
	n := 30
	if testing.Short() {
		n = 3
	}
	for _, m := range modes {
		for seed := range uint64(n) {
			t.Run(fmt.Sprintf("%s/seed=%d", m.name, seed), func(t *testing.T) {
				runRandom(t, setup{mode: m.mode, noNAK: m.noNAK, mtu: []int{256, 1024, 4096}[seed%3], rate: 1e9,
					delay: time.Duration(seed%4) * time.Millisecond, loss: 0.1, reorder: 0.05, seed: 1000 + seed})
			})
		}
	}
}
