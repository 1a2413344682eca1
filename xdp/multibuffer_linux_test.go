//go:build linux

package xdp

import (
	"bytes"
	"net/netip"
	"testing"
	"time"
)

// jumboSize is the RoCEv2-shaped payload of datagram seq on the jumbo lab: 3,000 to 8,900
// octets, so that every packet takes two to five frames of 2 KiB.
func jumboSize(seq int) int { return 3000 + (seq*1187)%5901 }

// TestVethMultiBuffer: on veth pairs with MTU 9000 and a multi-buffer socket (XDP_USE_SG, the
// program frags-aware), datagrams to 4791 longer than a frame arrive in several frames, More
// on all but the last, whose data joined are the whole frame as sent, in order; and packets
// up to 8,900 octets of payload sent through the TX ring, joined from a header and a body,
// leave in several frames and reach B's socket whole. Both in generic and in driver mode.
func TestVethMultiBuffer(t *testing.T) {
	for _, mode := range []AttachMode{AttachGeneric, AttachDriver} {
		t.Run(map[AttachMode]string{AttachGeneric: "generic", AttachDriver: "driver"}[mode], func(t *testing.T) {
			l := newVethLabMTU(t, 512, mode, 9000)
			if !l.Prog.Frags() || !l.Sock.MultiBuffer() {
				t.Fatalf("program frags-aware %v, socket multi-buffer %v", l.Prog.Frags(), l.Sock.MultiBuffer())
			}
			const n = 120
			from := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB, 0))
			go func() {
				for i := 0; i < n; i++ {
					from.WriteToUDPAddrPort(rocePayload(uint32(i), jumboSize(i)), netip.AddrPortFrom(addrA, 4791))
					if i%8 == 7 {
						time.Sleep(time.Millisecond)
					}
				}
			}()
			frames := make([]Frame, 16)
			var joined []byte
			got, parts := 0, 0
			for deadline := time.Now().Add(5 * time.Second); got < n; {
				if time.Now().After(deadline) {
					t.Fatalf("%d of %d packets arrived", got, n)
				}
				if _, err := l.Sock.Wait(50 * time.Millisecond); err != nil {
					t.Fatal(err)
				}
				k := l.Sock.Receive(frames)
				if k > 0 && frames[k-1].More {
					t.Fatalf("a batch of %d frames ends inside a packet", k)
				}
				for _, fr := range frames[:k] {
					if len(fr.Data) > l.Sock.FrameSize() {
						t.Fatalf("a frame of %d octets", len(fr.Data))
					}
					joined = append(joined, fr.Data...)
					parts++
					if fr.More {
						continue
					}
					d, err := ParseUDP(joined)
					if err != nil || d.DstPort != 4791 || !bytes.Equal(d.Payload, rocePayload(uint32(got), jumboSize(got))) {
						t.Fatalf("packet %d in %d frames (err %v): %d octets", got, parts, err, len(joined))
					}
					if min := (len(joined) + l.Sock.FrameSize() - 1) / l.Sock.FrameSize(); parts < min {
						t.Fatalf("packet %d of %d octets in %d frames", got, len(joined), parts)
					}
					got, parts, joined = got+1, 0, joined[:0]
				}
				l.Sock.Release(frames[:k])
			}

			// And back: joined packets of up to five frames through the TX ring.
			to := l.listenUDP(t, l.B, netip.AddrPortFrom(addrB, 6000))
			h := Header{SrcMAC: l.MACA, DstMAC: l.MACB, Src: addrA, Dst: addrB, SrcPort: 4791, DstPort: 6000}
			buf := make([]byte, 10000)
			before, _ := l.Sock.Stats()
			for seq := 0; seq < n; seq++ {
				f, err := AppendUDP(nil, h, rocePayload(uint32(seq), jumboSize(seq)))
				if err != nil {
					t.Fatal(err)
				}
				for deadline := time.Now().Add(2 * time.Second); ; {
					m, err := l.Sock.TransmitJoined([][]byte{f[:14]}, [][]byte{f[14:]})
					if err != nil {
						t.Fatal(err)
					}
					if m == 1 {
						break
					}
					if time.Now().After(deadline) {
						t.Fatalf("the TX ring did not take packet %d", seq)
					}
				}
				to.SetReadDeadline(time.Now().Add(2 * time.Second))
				m, src, err := to.ReadFromUDPAddrPort(buf)
				if err != nil {
					t.Fatalf("datagram %d: %v", seq, err)
				}
				if src != netip.AddrPortFrom(addrA, 4791) || !bytes.Equal(buf[:m], rocePayload(uint32(seq), jumboSize(seq))) {
					t.Fatalf("datagram %d from %v: %d octets differ from the %d sent", seq, src, m, jumboSize(seq))
				}
			}
			st, err := l.Sock.Stats()
			if err != nil {
				t.Fatal(err)
			}
			if sent := st.TxFrames - before.TxFrames; sent < 2*n || st.TxInvalidDescs != 0 || st.TxTooLong != 0 {
				t.Errorf("%d frames posted for %d packets of two to five frames; counters %+v", sent, n, st)
			}
		})
	}
}

// TestTransmitTooLongWithoutMultiBuffer: a socket bound without XDP_USE_SG refuses a packet
// longer than a frame (ErrFrameTooLong, counted) and posts nothing for it.
func TestTransmitTooLongWithoutMultiBuffer(t *testing.T) {
	l := newVethLab(t, 64, AttachGeneric)
	f, err := AppendUDP(nil, Header{SrcMAC: l.MACA, DstMAC: l.MACB, Src: addrA, Dst: addrB, SrcPort: 4791, DstPort: 6000},
		make([]byte, l.Sock.FrameSize()))
	if err != nil {
		t.Fatal(err)
	}
	if n, err := l.Sock.Transmit([][]byte{f}); n != 0 || err != ErrFrameTooLong {
		t.Fatalf("Transmit of %d octets: %d posted, %v", len(f), n, err)
	}
	if st, _ := l.Sock.Stats(); st.TxTooLong != 1 || st.TxFrames != 0 {
		t.Errorf("counters %+v", st)
	}
}
