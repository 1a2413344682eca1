//go:build linux

package xdp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"github.com/crem-project/crem/internal/harness/kdroplab"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/sys/unix"
)

// sizeOf is the RoCEv2-shaped payload size of datagram seq: 16 to 1400 octets.
func sizeOf(seq int) int { return 16 + (seq*97)%1385 }

// TestVethReceive sends from B to A: UDP datagrams to 4791 (IPv4 and IPv6) and to the CREM
// port carrying RoCEv2-shaped payloads with sequence numbers, UDP to another port, and ICMP
// echo requests. Every datagram to 4791 and the CREM port arrives on the AF_XDP socket whole
// and in order (Ethernet, IP and UDP headers, checksums, payload), none reaches A's own socket
// on 4791; every datagram to the other port reaches an ordinary UDP socket in A and none the
// AF_XDP socket; every ping is answered.
func TestVethReceive(t *testing.T) {
	l := newVethLab(t, 1024, AttachGeneric)
	other := l.listenUDP(t, l.A, netip.AddrPortFrom(addrA, 5000))
	shadow := l.listenUDP(t, l.A, netip.AddrPortFrom(addrA, 4791)) // must see nothing
	from := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB, 40000))
	from6 := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB6, 40001))

	const n, n6, nCrem, nOther = 300, 60, 40, 50
	type sent struct {
		src, dst netip.AddrPort
		seq      int
	}
	var want []sent
	k, k6, kc, ko := 0, 0, 0, 0
	for k+k6+kc+ko < n+n6+nCrem+nOther {
		var err error
		switch {
		case k < n:
			dst := netip.AddrPortFrom(addrA, 4791)
			_, err = from.WriteToUDPAddrPort(rocePayload(uint32(k), sizeOf(k)), dst)
			want = append(want, sent{netip.AddrPortFrom(addrB, 40000), dst, k})
			k++
		case k6 < n6:
			dst := netip.AddrPortFrom(addrA6, 4791)
			_, err = from6.WriteToUDPAddrPort(rocePayload(uint32(k6), sizeOf(k6)), dst)
			want = append(want, sent{netip.AddrPortFrom(addrB6, 40001), dst, k6})
			k6++
		case kc < nCrem:
			dst := netip.AddrPortFrom(addrA, cremPort)
			_, err = from.WriteToUDPAddrPort(rocePayload(uint32(kc), sizeOf(kc)), dst)
			want = append(want, sent{netip.AddrPortFrom(addrB, 40000), dst, kc})
			kc++
		default:
			_, err = from.WriteToUDPAddrPort(rocePayload(uint32(ko), sizeOf(ko)), netip.AddrPortFrom(addrA, 5000))
			ko++
		}
		if err != nil {
			t.Fatal(err)
		}
		if (k+k6+kc+ko)%32 == 0 {
			time.Sleep(time.Millisecond) // within the veth's backlog
		}
	}
	// The AF_XDP socket sees the redirected datagrams in the order they were sent.
	l.receive(t, len(want), 5*time.Second, func(i int, frame []byte) {
		if i >= len(want) {
			t.Fatalf("frame %d beyond the %d sent: %x", i, len(want), frame)
		}
		w := want[i]
		d, err := ParseUDP(frame)
		if err != nil {
			t.Fatalf("frame %d: %v", i, err)
		}
		if d.SrcMAC != l.MACB || d.DstMAC != l.MACA {
			t.Errorf("frame %d: MACs %x -> %x", i, d.SrcMAC, d.DstMAC)
		}
		if got := (sent{netip.AddrPortFrom(d.Src, d.SrcPort), netip.AddrPortFrom(d.Dst, d.DstPort), w.seq}); got != w {
			t.Errorf("frame %d: %v -> %v, want %v -> %v", i, got.src, got.dst, w.src, w.dst)
		}
		if !bytes.Equal(d.Payload, rocePayload(uint32(w.seq), sizeOf(w.seq))) {
			t.Errorf("frame %d (seq %d): payload of %d octets differs", i, w.seq, len(d.Payload))
		}
		if len(frame) != ethLen+len(d.IPHeader)+udpLen+len(d.Payload) {
			t.Errorf("frame %d: %d octets, headers and payload %d", i, len(frame), ethLen+len(d.IPHeader)+udpLen+len(d.Payload))
		}
		if l.CsumOff && !d.Checksum() {
			t.Errorf("frame %d: checksums do not hold", i)
		} else if d.Src.Is4() && fold(sumWords(0, d.IPHeader)) != 0xffff {
			t.Errorf("frame %d: IPv4 header checksum", i)
		}
	})
	if !l.CsumOff {
		t.Log("B's transmit checksum offload stayed on: UDP checksums not checked")
	}
	buf := make([]byte, 2048)
	for i := 0; i < nOther; i++ {
		other.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, src, err := other.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d of %d to port 5000: %v", i, nOther, err)
		}
		if src != netip.AddrPortFrom(addrB, 40000) || !bytes.Equal(buf[:m], rocePayload(uint32(i), sizeOf(i))) {
			t.Errorf("datagram %d to port 5000 from %v differs", i, src)
		}
	}
	shadow.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
	if _, src, err := shadow.ReadFromUDPAddrPort(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("A's own socket on 4791 received from %v (err %v): the program passed a matching datagram", src, err)
	}
	if frames := make([]Frame, 8); l.Sock.Receive(frames) != 0 {
		t.Errorf("a frame beyond those sent to 4791 and the CREM port: %x", frames[0].Data)
	}

	// Ping, through the program (XDP_PASS) to A's stack and back.
	kdroplab.InNetns(t, l.B, func() {
		c, err := icmp.ListenPacket("ip4:icmp", addrB.String())
		if err != nil {
			t.Errorf("ICMP socket: %v", err)
			return
		}
		defer c.Close()
		for seq := 1; seq <= 3; seq++ {
			msg := icmp.Message{Type: ipv4.ICMPTypeEcho, Body: &icmp.Echo{ID: 0x4d2, Seq: seq, Data: []byte("crem xdp")}}
			b, _ := msg.Marshal(nil)
			if _, err := c.WriteTo(b, &net.IPAddr{IP: addrA.AsSlice()}); err != nil {
				t.Errorf("ping %d: %v", seq, err)
				return
			}
			c.SetReadDeadline(time.Now().Add(2 * time.Second))
			for {
				m, _, err := c.ReadFrom(buf)
				if err != nil {
					t.Errorf("ping %d unanswered: %v", seq, err)
					return
				}
				r, err := icmp.ParseMessage(1, buf[:m])
				if err == nil && r.Type == ipv4.ICMPTypeEchoReply && r.Body.(*icmp.Echo).Seq == seq {
					break
				}
			}
		}
	})

	c, err := l.Prog.Counters()
	if err != nil {
		t.Fatal(err)
	}
	if c.Redirected != uint64(len(want)) || c.NoSocket != 0 {
		t.Errorf("program counters %+v, want %d redirected", c, len(want))
	}
	st, err := l.Sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxFrames != uint64(len(want)) || st.RxDropped != 0 || st.RxRingFull != 0 || st.RxInvalidDescs != 0 {
		t.Errorf("socket counters %+v, want %d frames received and nothing dropped", st, len(want))
	}
	t.Logf("attach %s, bind %s, need wakeup %v; %+v", l.Prog.AttachMode(), l.Sock.BindMode(), l.Sock.NeedWakeup(), st)
}

// TestVethTransmit sends frames built in Go (Ethernet, IPv4 or IPv6, UDP with its checksum)
// through the TX ring in batches, every other batch by TransmitJoined (each frame given as its
// Ethernet header and the rest); an ordinary UDP socket in B receives every one, in order,
// from A's address and port 4791, every payload octet as sent. The kernel drops a datagram
// whose checksum fails, so each arrival also checks AppendUDP's checksums.
func TestVethTransmit(t *testing.T) {
	l := newVethLab(t, 256, AttachGeneric) // 128 transmit frames: the batches reuse them
	to := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB, 6000))
	to6 := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB6, 6000))
	const n = 1000
	h4 := Header{SrcMAC: l.MACA, DstMAC: l.MACB, Src: addrA, Dst: addrB, SrcPort: 4791, DstPort: 6000}
	h6 := Header{SrcMAC: l.MACA, DstMAC: l.MACB, Src: addrA6, Dst: addrB6, SrcPort: 4791, DstPort: 6000}
	frames := make([][]byte, 0, 32)
	var heads, bodies [][]byte
	buf := make([]byte, 2048)
	// read takes datagram seq off c: in order, from A's address, every octet as sent.
	read := func(c *net.UDPConn, want netip.AddrPort, seq int) {
		c.SetReadDeadline(time.Now().Add(2 * time.Second))
		m, src, err := c.ReadFromUDPAddrPort(buf)
		if err != nil {
			t.Fatalf("datagram %d from %v: %v", seq, want, err)
		}
		if src != want {
			t.Errorf("datagram %d from %v, want %v", seq, src, want)
		}
		if !bytes.Equal(buf[:m], rocePayload(uint32(seq), sizeOf(seq))) {
			t.Errorf("datagram %d: %d octets (seq %d) differ from the %d sent", seq, m,
				binary.BigEndian.Uint32(buf[8:])&0xffffff, sizeOf(seq))
		}
	}
	for seq := 0; seq < n; {
		frames = frames[:0]
		for j := 0; j < 32 && seq+j < n; j++ {
			h := h4
			if (seq+j)%4 == 3 {
				h = h6
			}
			f, err := AppendUDP(nil, h, rocePayload(uint32(seq+j), sizeOf(seq+j)))
			if err != nil {
				t.Fatal(err)
			}
			frames = append(frames, f)
		}
		// Every other batch goes by TransmitJoined, each frame given as its Ethernet header and
		// the rest, joined in the UMEM frame.
		joined := seq/32%2 == 1
		heads, bodies := heads[:0], bodies[:0]
		for _, f := range frames {
			heads, bodies = append(heads, f[:14]), append(bodies, f[14:])
		}
		sent := 0
		for deadline := time.Now().Add(2 * time.Second); sent < len(frames); {
			var m int
			var err error
			if joined {
				m, err = l.Sock.TransmitJoined(heads[sent:], bodies[sent:])
			} else {
				m, err = l.Sock.Transmit(frames[sent:])
			}
			if err != nil {
				t.Fatal(err)
			}
			sent += m
			if time.Now().After(deadline) {
				t.Fatalf("the TX ring took %d of %d frames in 2 s", sent, len(frames))
			}
		}
		// Read what this batch carried, before B's socket buffers could overflow.
		for j := seq; j < seq+sent; j++ {
			if j%4 == 3 {
				read(to6, netip.AddrPortFrom(addrA6, 4791), j)
			} else {
				read(to, netip.AddrPortFrom(addrA, 4791), j)
			}
		}
		seq += sent
	}
	for deadline := time.Now().Add(time.Second); l.Sock.TxPending() > 0 && time.Now().Before(deadline); {
		l.Sock.Reclaim()
		l.Sock.Flush()
		time.Sleep(time.Millisecond)
	}
	st, err := l.Sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.TxFrames != n || st.Completions != n || st.TxInvalidDescs != 0 || l.Sock.TxPending() != 0 {
		t.Errorf("socket counters %+v, %d pending: want %d sent and completed", st, l.Sock.TxPending(), n)
	}
	t.Logf("%+v", st)
}

// sendRoCE sends n RoCEv2-shaped datagrams from B to A's port 4791, paced within the veth's
// backlog.
func (l *vethLab) sendRoCE(t testing.TB, n int) {
	t.Helper()
	from := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB, 0))
	for i := 0; i < n; i++ {
		if _, err := from.WriteToUDPAddrPort(rocePayload(uint32(i), sizeOf(i)), netip.AddrPortFrom(addrA, 4791)); err != nil {
			t.Fatal(err)
		}
		if i%32 == 31 {
			time.Sleep(time.Millisecond)
		}
	}
}

// TestVethDriverMode attaches with AttachAuto: on veth the driver mode holds (veth runs XDP in
// its own receive path) and the socket binds in copy mode (veth offers no zero-copy); the
// datagrams to 4791 arrive as in generic mode.
func TestVethDriverMode(t *testing.T) {
	l := newVethLab(t, 256, AttachAuto)
	if got := l.Prog.AttachMode(); got != "driver" {
		t.Errorf("attach mode %q on veth, want driver", got)
	}
	if got := l.Sock.BindMode(); got != "copy" {
		t.Errorf("bind mode %q on veth, want copy", got)
	}
	const n = 100
	l.sendRoCE(t, n)
	l.receive(t, n, 5*time.Second, func(i int, frame []byte) {
		d, err := ParseUDP(frame)
		if err != nil || d.DstPort != 4791 || !bytes.Equal(d.Payload, rocePayload(uint32(i), sizeOf(i))) {
			t.Fatalf("frame %d (err %v): %x", i, err, frame)
		}
	})
}

// TestSocketSteadyStateAllocations: receiving a batch in place, releasing it and transmitting
// a frame allocate nothing once the socket is set up.
func TestSocketSteadyStateAllocations(t *testing.T) {
	l := newVethLab(t, 256, AttachGeneric)
	l.sendRoCE(t, 110)
	if ok, err := l.Sock.Wait(2 * time.Second); !ok || err != nil {
		t.Fatalf("nothing arrived (err %v)", err)
	}
	time.Sleep(50 * time.Millisecond)
	f, err := AppendUDP(nil, Header{SrcMAC: l.MACA, DstMAC: l.MACB, Src: addrA, Dst: addrB, SrcPort: 4791, DstPort: 9}, rocePayload(0, 200))
	if err != nil {
		t.Fatal(err)
	}
	pkts := [][]byte{f}
	frames := make([]Frame, 1)
	allocs := testing.AllocsPerRun(100, func() {
		n := l.Sock.Receive(frames)
		l.Sock.Release(frames[:n])
		if _, err := l.Sock.Transmit(pkts); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Errorf("%.1f allocations per receive, release and transmit", allocs)
	}
	st, err := l.Sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxFrames < 100 || st.TxFrames < 100 {
		t.Errorf("counters %+v: the runs did not receive and transmit", st)
	}
}

// TestVethOffSwitch: with the socket unregistered, datagrams to 4791 go at once to the kernel's
// socket (counted by the program as finding no socket); with the program detached the device
// shows no XDP program and they still do; attached again, they come back to the AF_XDP socket.
func TestVethOffSwitch(t *testing.T) {
	l := newVethLab(t, 256, AttachGeneric)
	kernel := l.listenUDP(t, l.A, netip.AddrPortFrom(addrA, 4791))
	buf := make([]byte, 2048)
	expectKernel := func(stage string, n int) {
		t.Helper()
		l.sendRoCE(t, n)
		for i := 0; i < n; i++ {
			kernel.SetReadDeadline(time.Now().Add(2 * time.Second))
			m, _, err := kernel.ReadFromUDPAddrPort(buf)
			if err != nil {
				t.Fatalf("%s: datagram %d of %d on the kernel's socket: %v", stage, i, n, err)
			}
			if !bytes.Equal(buf[:m], rocePayload(uint32(i), sizeOf(i))) {
				t.Errorf("%s: datagram %d differs", stage, i)
			}
		}
		if frames := make([]Frame, 1); l.Sock.Receive(frames) != 0 {
			t.Errorf("%s: a frame on the AF_XDP socket", stage)
		}
	}
	if err := l.Prog.Unregister(0); err != nil {
		t.Fatal(err)
	}
	expectKernel("unregistered", 20)
	if c, err := l.Prog.Counters(); err != nil || c.NoSocket != 20 || c.Redirected != 0 {
		t.Errorf("counters %+v (err %v), want 20 without a socket", c, err)
	}
	if err := l.Prog.Detach(); err != nil {
		t.Fatal(err)
	}
	if out := kdroplab.Sh(t, "ip", "-n", l.A, "link", "show", "dev", "xa"); strings.Contains(out, "xdp") || l.Prog.AttachMode() != "" {
		t.Errorf("after Detach (mode %q): %s", l.Prog.AttachMode(), out)
	}
	expectKernel("detached", 20)
	kdroplab.InNetns(t, l.A, func() {
		ifi, err := net.InterfaceByName("xa")
		if err == nil {
			err = l.Prog.Attach(ifi.Index, AttachGeneric)
		}
		if err == nil {
			err = l.Prog.Register(0, l.Sock)
		}
		if err != nil {
			t.Errorf("attaching again: %v", err)
		}
	})
	if out := kdroplab.Sh(t, "ip", "-n", l.A, "link", "show", "dev", "xa"); !strings.Contains(out, "xdpgeneric") {
		t.Errorf("attached again, the device shows no generic XDP program: %s", out)
	}
	l.sendRoCE(t, 20)
	l.receive(t, 20, 5*time.Second, func(i int, frame []byte) {
		if d, err := ParseUDP(frame); err != nil || !bytes.Equal(d.Payload, rocePayload(uint32(i), sizeOf(i))) {
			t.Fatalf("frame %d after attaching again (err %v)", i, err)
		}
	})
}

// TestSocketCountersAtTheLimits fills each ring of a socket of 16 frames (8 to receive into, 8
// to transmit from) and checks that every outcome is counted: a transmit cut short by the full
// ring, a packet longer than a frame, the completions; datagrams the kernel dropped for want of
// a fill-ring buffer (its rx_dropped and fill-ring-empty counters) and the receive calls that
// found the fill ring empty; an invalid TX descriptor (the kernel's tx_invalid_descs); and that
// receiving resumes once the frames are released.
func TestSocketCountersAtTheLimits(t *testing.T) {
	l := newVethLab(t, 16, AttachGeneric)
	f, err := AppendUDP(nil, Header{SrcMAC: l.MACA, DstMAC: l.MACB, Src: addrA, Dst: addrB, SrcPort: 4791, DstPort: 9}, rocePayload(0, 100))
	if err != nil {
		t.Fatal(err)
	}
	pkts := make([][]byte, 20)
	for i := range pkts {
		pkts[i] = f
	}
	if n, err := l.Sock.Transmit(pkts); n != 8 || err != nil {
		t.Errorf("transmit of 20 on 8 frames: %d (err %v), want 8", n, err)
	}
	if _, err := l.Sock.Transmit([][]byte{make([]byte, l.Sock.FrameSize()+1)}); !errors.Is(err, ErrFrameTooLong) {
		t.Errorf("a packet longer than a frame: %v", err)
	}
	for deadline := time.Now().Add(2 * time.Second); l.Sock.TxPending() > 0 && time.Now().Before(deadline); {
		l.Sock.Reclaim()
		l.Sock.Flush()
		time.Sleep(time.Millisecond)
	}

	l.sendRoCE(t, 12) // 8 fill buffers: 4 dropped
	frames := make([]Frame, 16)
	held := 0
	for deadline := time.Now().Add(2 * time.Second); held < 8 && time.Now().Before(deadline); {
		l.Sock.Wait(10 * time.Millisecond)
		held += l.Sock.Receive(frames[held:])
	}
	if held != 8 {
		t.Fatalf("%d frames received, want the 8 the fill ring held", held)
	}
	if n := l.Sock.Receive(frames[held:]); n != 0 {
		t.Errorf("%d frames beyond the fill ring's 8", n)
	}
	st, err := l.Sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.TxFrames != 8 || st.TxRingFull == 0 || st.TxTooLong != 1 || st.Completions != 8 {
		t.Errorf("transmit counters %+v: want 8 sent and completed, the full ring and the long packet counted", st)
	}
	if st.RxFrames != 8 || st.RxDropped != 4 || st.RxFillRingEmptyDescs == 0 || st.FillEmpty == 0 {
		t.Errorf("receive counters %+v: want 8 received, 4 dropped by the kernel, the empty fill ring counted on both sides", st)
	}
	// A descriptor outside the UMEM, posted by hand: the kernel skips it and counts it.
	s := l.Sock
	*s.tx.desc(s.tx.prod) = unix.XDPDesc{Addr: uint64(len(s.umem)) + 4096, Len: 100}
	s.tx.prod++
	atomic.StoreUint32(s.tx.producer, s.tx.prod)
	if err := s.Flush(); err != nil {
		t.Fatal(err)
	}
	if st, err := s.Stats(); err != nil || st.TxInvalidDescs != 1 {
		t.Errorf("after an invalid descriptor: %+v (err %v), want one counted", st, err)
	}
	l.Sock.Release(frames[:held])
	l.sendRoCE(t, 5)
	l.receive(t, 5, 2*time.Second, func(i int, frame []byte) {
		if d, err := ParseUDP(frame); err != nil || !bytes.Equal(d.Payload, rocePayload(uint32(i), sizeOf(i))) {
			t.Fatalf("frame %d after the release (err %v)", i, err)
		}
	})
	t.Logf("%+v", st)
}

// TestSocketReleaseAddr: frames held past their batch and given back one by one, out of order
// (ReleaseAddr, as a caller that hands frames on in place does), return to the fill ring: a
// socket of 8 receive frames takes three rounds of 8 datagrams, each read whole in its frame
// while the round's frames are held.
func TestSocketReleaseAddr(t *testing.T) {
	l := newVethLab(t, 16, AttachGeneric)
	frames := make([]Frame, 8)
	for round := range 3 {
		l.sendRoCE(t, 8)
		held := 0
		for deadline := time.Now().Add(2 * time.Second); held < 8 && time.Now().Before(deadline); {
			l.Sock.Wait(10 * time.Millisecond)
			held += l.Sock.Receive(frames[held:])
		}
		if held != 8 {
			t.Fatalf("round %d: %d frames received, want 8", round, held)
		}
		for i, fr := range frames {
			if d, err := ParseUDP(fr.Data); err != nil || !bytes.Equal(d.Payload, rocePayload(uint32(i), sizeOf(i))) {
				t.Fatalf("round %d: frame %d (err %v): %x", round, i, err, fr.Data)
			}
		}
		for i := len(frames) - 1; i >= 0; i-- {
			l.Sock.ReleaseAddr(frames[i].Addr)
		}
	}
	st, err := l.Sock.Stats()
	if err != nil {
		t.Fatal(err)
	}
	if st.RxFrames != 24 || st.RxDropped != 0 {
		t.Errorf("counters %+v: want 24 received, none dropped", st)
	}
}
