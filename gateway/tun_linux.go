package gateway

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// tunPath is the transparent data path: IP packets routed into a TUN device are read whole;
// packets are sent on (unchanged, or restored under the flow's header template) through a raw
// IPv4 socket whose firewall mark lets policy routing keep them out of the device.
type tunPath struct {
	dev  *os.File
	name string
	raw  int
}

type ifreqFlags struct {
	name  [unix.IFNAMSIZ]byte
	flags uint16
	_     [22]byte
}

func openTun(r *resolved) (*tunPath, error) {
	fd, err := unix.Open("/dev/net/tun", unix.O_RDWR|unix.O_NONBLOCK|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("gateway: tun: /dev/net/tun: %w", err)
	}
	var req ifreqFlags
	copy(req.name[:], r.tunName)
	req.flags = unix.IFF_TUN | unix.IFF_NO_PI
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.TUNSETIFF, uintptr(unsafe.Pointer(&req))); e != 0 {
		unix.Close(fd)
		return nil, fmt.Errorf("gateway: tun: TUNSETIFF %s: %w", r.tunName, e)
	}
	if err := linkUp(r.tunName); err != nil {
		unix.Close(fd)
		return nil, err
	}
	raw, err := unix.Socket(unix.AF_INET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, unix.IPPROTO_RAW)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("gateway: tun: raw socket: %w", err)
	}
	if err := unix.SetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_MARK, r.tunMark); err != nil {
		unix.Close(fd)
		unix.Close(raw)
		return nil, fmt.Errorf("gateway: tun: SO_MARK: %w", err)
	}
	unix.SetsockoptInt(raw, unix.SOL_SOCKET, unix.SO_SNDBUF, 8<<20)
	return &tunPath{dev: os.NewFile(uintptr(fd), "/dev/net/tun"), name: r.tunName, raw: raw}, nil
}

func linkUp(name string) error {
	s, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("gateway: tun: %w", err)
	}
	defer unix.Close(s)
	ifr, err := unix.NewIfreq(name)
	if err != nil {
		return fmt.Errorf("gateway: tun: %w", err)
	}
	if err := unix.IoctlIfreq(s, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("gateway: tun: flags of %s: %w", name, err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(s, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("gateway: tun: bringing %s up: %w", name, err)
	}
	return nil
}

func (t *tunPath) close() {
	t.dev.Close()
	unix.Close(t.raw)
}

// send sends one whole IPv4 packet on toward its destination.
func (t *tunPath) send(b []byte) error {
	if len(b) < 20 || b[0]>>4 != 4 {
		return errors.New("not IPv4")
	}
	sa := &unix.SockaddrInet4{Addr: [4]byte(b[16:20])}
	return unix.Sendto(t.raw, b, 0, sa)
}

// tunLoop reads packets from the device and hands each to its shard (small ones copied into
// small buffers, as handOn does).
func (g *Gateway) tunLoop() {
	p := g.large.get(true)
	var pause readPause
	for {
		n, err := g.tun.dev.Read(p.buf)
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				return
			}
			g.c.readErrors.Add(1)
			if !pause.wait(g) {
				return
			}
			continue
		}
		pause.reset()
		g.c.rx[kindTun].Add(1)
		g.c.rxBytes[kindTun].Add(uint64(n))
		b := p.buf[:n]
		if n < 20 || b[0]>>4 != 4 {
			g.c.notRoCE.Add(1)
			g.c.dropped[kindTun].Add(1)
			continue
		}
		src, dst := netip.AddrFrom4([4]byte(b[12:16])), netip.AddrFrom4([4]byte(b[16:20]))
		if g.pcap != nil {
			g.pcap.recordIP(b)
		}
		q := p
		if n <= smallSize {
			q = g.small.get(true)
			copy(q.buf, b)
		} else if r := g.large.get(false); r != nil {
			p = r
		} else {
			g.c.buffersExhausted.Add(1)
			g.c.dropped[kindTun].Add(1)
			continue
		}
		q.n, q.kind, q.ce = n, kindTun, b[1]&3 == 3
		sh := g.shards[g.pairHash(src, dst)]
		select {
		case sh.in <- q:
			g.c.handed[kindTun].Add(1)
		default:
			g.c.shardFull.Add(1)
			g.c.dropped[kindTun].Add(1)
			g.putPkt(q)
		}
	}
}
