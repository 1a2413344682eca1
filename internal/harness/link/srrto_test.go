package link

import (
	"testing"

	"github.com/crem-project/crem/rc"
)

// sr without NAKs (the SR RTO, protocol notes R19) in virtual time, on the figures' path (1
// Gbit/s, MTU 1024, 20 ms RTT, 2 percent Bernoulli loss each way, 4 MiB x 4 WRITEs): recovery
// is by per-packet timeout alone (every retransmission is a timeout retransmission), and the
// runs reported on the ACKs keep the timers from resending what arrived, so the
// retransmissions are at most 1.3x the data packets lost plus 8 (measured: exactly the packets
// lost; before R19 some 23 000 for 790 lost).
func TestSRNoNAKVirtualTime(t *testing.T) {
	const size, iters = 4 << 20, 4
	for _, seed := range []uint64{1, 2, 3} {
		rto := bulk(t, rc.ModeSR, true, 0.02, seed, size, iters)
		t.Logf("seed %d sr-rto 2%%: %+v", seed, rto)
		if rto.retx != rto.timeoutRetx {
			t.Errorf("seed %d: %d retransmissions, %d of them by timeout: recovery must be by timeout only",
				seed, rto.retx, rto.timeoutRetx)
		}
		if float64(rto.retx) > 1.3*float64(rto.dataDropped)+8 {
			t.Errorf("seed %d: sr-rto retransmitted %d, more than 1.3 x %d lost + 8", seed, rto.retx, rto.dataDropped)
		}
		if rto.acks+rto.naks > rto.data/4 {
			t.Errorf("seed %d: %d ACKs and %d reports for %d data packets, more than 1/4", seed, rto.acks, rto.naks, rto.data)
		}
	}
}
