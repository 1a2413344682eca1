package policy

import (
	"testing"
	"time"
)

// The project's message policy (C6, C16): nothing beyond the draft without loss; extra repair
// for a long message on a lossy long path, inside the budget of half the source rate (C11 b)
// and the receiver's Max m; more repair for bursts than for independent loss of the same mean.
func TestMessageCodeC6C16(t *testing.T) {
	// 1 GiB at 400 Gbit/s (262,144 packets of 4 KiB, 21.7 ms) over 25 ms.
	long := Message{Packets: 262144, Injection: 21700 * time.Microsecond, RTT: 25 * time.Millisecond, MaxM: 64}
	if c := MessageCode(long); c != (Code{K: DefaultK}) {
		t.Fatalf("lossless: %+v, want the draft's k = 32, m = 0 and nothing extra", c)
	}
	for _, loss := range []float64{1e-4, 1e-3, 1e-2} {
		m := long
		m.Loss = loss
		c := MessageCode(m)
		if draft := ChooseM(c.K, loss, DefaultEpsilon, DefaultRho, 64); c.M != draft {
			t.Errorf("loss %g: M = %d, want the draft's %d for k = %d", loss, c.M, draft, c.K)
		}
		if c.Extra <= 0 || c.M+c.Extra > c.K/2 || c.M+c.Extra > 64 {
			t.Errorf("loss %g: %+v: want extra repair within k/2 and Max m", loss, c)
		}
		// The chosen code leaves at most MessageRho of messages a second round trip, and one
		// symbol less per block would not.
		mp := c.M + c.Extra
		blocks := float64(long.Packets / c.K)
		if fail := blocks * TailAbove(c.K+mp, mp, loss); fail > MessageRho {
			t.Errorf("loss %g: %+v fails some block with probability %.2g", loss, c, fail)
		}
		if fail := blocks * TailAbove(c.K+mp-1, mp-1, loss); mp > c.M && fail <= MessageRho/2 {
			t.Errorf("loss %g: %+v spends a symbol per block that MessageRho does not need (%.2g without)", loss, c, fail)
		}
		b := m
		b.Burst = 4
		if cb := MessageCode(b); float64(cb.M+cb.Extra)/float64(cb.K) <= float64(c.M+c.Extra)/float64(c.K) {
			t.Errorf("loss %g: bursts of 4 get %+v, no more repair than independent loss %+v", loss, cb, c)
		}
	}
	// A short message takes a block of its own size, no repair where its loss is already rarer
	// than MessageRho, and never more than Max m.
	short := Message{Packets: 32, Injection: 2700 * time.Nanosecond, RTT: 25 * time.Millisecond, MaxM: 8}
	for _, loss := range []float64{1e-6, 1e-5} {
		short.Loss = loss
		if c := MessageCode(short); c.K != 32 || c.M+c.Extra != 0 {
			t.Errorf("32 packets at %g: %+v, want k = 32 and no repair", loss, c)
		}
	}
	short.Loss = 1e-2
	if c := MessageCode(short); c.K > 32 || c.M+c.Extra == 0 || c.M+c.Extra > 8 {
		t.Errorf("32 packets at 1e-2: %+v, want a block of at most 32 with repair within Max m 8", c)
	}
}
