package udp

import (
	"net"
	"runtime"
	"testing"
	"time"
)

// The kernel's drops on a host's socket are counted: with a receive buffer of a few datagrams
// and the read loop held (the host's lock), a burst of datagrams overflows the socket; once the
// loop runs again, every datagram sent is either one the host read (here all runts) or one the
// kernel dropped, and Socket().Drops has the dropped ones.
func TestSocketDropsCounted(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the kernel's drop count is Linux's")
	}
	h, err := Listen("127.0.0.1:0", Options{SocketBuffer: 4096})
	if err != nil {
		t.Skipf("no UDP on loopback: %v", err)
	}
	defer h.Close()
	st := h.Socket()
	if !st.DropsKnown || st.Drops != 0 || st.Read <= 0 || st.Read > 64<<10 {
		t.Fatalf("a fresh socket: %+v", st)
	}
	src, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(h.LocalAddr()))
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	const burst = 400
	pkt := make([]byte, 8) // shorter than a BTH: a runt
	h.mu.Lock()            // the read loop stops at its next datagram
	for range burst {
		if _, err := src.Write(pkt); err != nil {
			h.mu.Unlock()
			t.Fatal(err)
		}
	}
	h.mu.Unlock()
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, runts := h.Dropped()
		st = h.Socket()
		if runts+st.Drops == burst {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d datagrams sent, %d read, %d counted as dropped by the kernel", burst, runts, st.Drops)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if st.Drops == 0 {
		t.Fatalf("a burst of %d into a %d-octet buffer: no drop counted", burst, st.Read)
	}
	// The count the datagrams carry (SO_RXQ_OVFL) agrees once one arrives after the drops.
	src.Write(pkt)
	deadline = time.Now().Add(10 * time.Second)
	for {
		h.mu.Lock()
		c, seen := h.ctlDrops, h.ctlDropsSeen
		h.mu.Unlock()
		if seen && uint64(c) == st.Drops {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("SO_RXQ_OVFL: %d (seen %v), the socket's counter %d", c, seen, st.Drops)
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("%d of %d dropped by the kernel (receive buffer %d, forced %v)", st.Drops, burst, st.Read, st.ReadForced)
}
