//go:build linux && (386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64)

package kdrop

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/btf"
	"github.com/cilium/ebpf/link"
	"github.com/cilium/ebpf/ringbuf"
	"github.com/crem-project/crem/psn"
)

// Source is the loaded and attached program. Next and Lost are for one goroutine; Close may
// be called from another to end a Next.
type Source struct {
	objs   kdropObjects
	link   link.Link
	rd     *ringbuf.Reader
	attach string
	rec    ringbuf.Record
	// lostSeen is what Lost last read of each flow's count (the kernel's counts only grow;
	// the map is least-recently-used, so a flow may disappear and start again from 0).
	lostSeen map[kdropLostKey]uint64
}

// Open loads the program, fills its maps from cfg and attaches it: to tp_btf/kfree_skb, or,
// where the kernel refuses that, to the tracepoint skb:kfree_skb.
func Open(cfg Config) (*Source, error) {
	if _, err := btf.LoadKernelSpec(); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBTF, err)
	}
	for _, r := range cfg.Reasons {
		if r >= 256 {
			return nil, fmt.Errorf("kdrop: drop reason %d: only reasons below 256 are supported", r)
		}
	}
	if len(cfg.Devices) == 0 || len(cfg.Devices) > 64 || len(cfg.Ports) == 0 || len(cfg.Ports) > 64 {
		return nil, fmt.Errorf("kdrop: %d devices and %d ports: 1 to 64 of each", len(cfg.Devices), len(cfg.Ports))
	}
	spec, err := loadKdrop()
	if err != nil {
		return nil, fmt.Errorf("kdrop: %w", err)
	}
	if cfg.RingSize != 0 {
		if cfg.RingSize < os.Getpagesize() || cfg.RingSize&(cfg.RingSize-1) != 0 {
			return nil, fmt.Errorf("kdrop: ring size %d is not a power of two of a page or more", cfg.RingSize)
		}
		spec.Maps["events"].MaxEntries = uint32(cfg.RingSize)
	}
	s := &Source{lostSeen: map[kdropLostKey]uint64{}}
	progs := []string{"kfree_skb_dyn", "kfree_skb_btf", "kfree_skb_tp"}
	switch {
	case cfg.Tracepoint:
		progs = progs[2:]
	case cfg.Linear:
		progs = progs[1:]
	}
	var errs []error
	for _, name := range progs {
		l, objs, err := loadAndAttach(spec, name)
		if err == nil {
			s.objs, s.link, s.attach = objs, l, name
			break
		}
		var ve *ebpf.VerifierError
		if errors.Is(err, syscall.EPERM) && !errors.As(err, &ve) {
			return nil, fmt.Errorf("%w: %v", ErrPermission, err)
		}
		errs = append(errs, err)
	}
	if s.link == nil {
		return nil, fmt.Errorf("%w: %v", ErrNoTracepoint, errors.Join(errs...))
	}
	if err := s.fill(cfg); err != nil {
		s.Close()
		return nil, err
	}
	if s.rd, err = ringbuf.NewReader(s.objs.Events); err != nil {
		s.Close()
		return nil, fmt.Errorf("kdrop: ring buffer: %w", err)
	}
	return s, nil
}

// loadAndAttach loads the maps and the one program name, and attaches it.
func loadAndAttach(spec *ebpf.CollectionSpec, name string) (link.Link, kdropObjects, error) {
	var objs kdropObjects
	one := spec.Copy()
	for n := range one.Programs {
		if n != name {
			delete(one.Programs, n)
		}
	}
	coll, err := ebpf.NewCollection(one)
	if err != nil {
		return nil, objs, fmt.Errorf("kdrop: loading %s: %w", name, err)
	}
	if err := coll.Assign(&objs.kdropMaps); err != nil {
		coll.Close()
		return nil, objs, err
	}
	prog := coll.DetachProgram(name)
	coll.Close() // the maps assigned above stay open
	var l link.Link
	switch name {
	case "kfree_skb_dyn":
		objs.KfreeSkbDyn = prog
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	case "kfree_skb_btf":
		objs.KfreeSkbBtf = prog
		l, err = link.AttachTracing(link.TracingOptions{Program: prog})
	default:
		objs.KfreeSkbTp = prog
		l, err = link.Tracepoint("skb", "kfree_skb", prog, nil)
	}
	if err != nil {
		objs.Close()
		return nil, objs, fmt.Errorf("kdrop: attaching %s: %w", name, err)
	}
	return l, objs, nil
}

func (s *Source) fill(cfg Config) error {
	for _, d := range cfg.Devices {
		k := kdropDevKey{Netns: d.Netns, Ifindex: uint32(d.Ifindex)}
		if err := s.objs.Devices.Put(k, uint32(d.Port)); err != nil {
			return fmt.Errorf("kdrop: device %d: %w", d.Ifindex, err)
		}
	}
	for _, p := range cfg.Ports {
		// The program compares the port as it lies in the packet (network order).
		var be [2]byte
		binary.BigEndian.PutUint16(be[:], p)
		if err := s.objs.Ports.Put(*(*uint16)(unsafe.Pointer(&be)), uint8(1)); err != nil {
			return fmt.Errorf("kdrop: port %d: %w", p, err)
		}
	}
	for _, r := range cfg.Reasons {
		if err := s.objs.Reasons.Put(r, uint8(1)); err != nil {
			return fmt.Errorf("kdrop: reason %d: %w", r, err)
		}
	}
	return nil
}

// Attach says where the program runs and how it reads packets: "tp_btf+dynptr" (the whole
// packet), "tp_btf" or "tracepoint" (the linear part of the buffer only).
func (s *Source) Attach() string {
	switch s.attach {
	case "kfree_skb_dyn":
		return "tp_btf+dynptr"
	case "kfree_skb_btf":
		return "tp_btf"
	}
	return "tracepoint"
}

// SetDeadline bounds how long Next waits (zero: no bound).
func (s *Source) SetDeadline(t time.Time) { s.rd.SetDeadline(t) }

// Next returns the next drop, waiting until the deadline (os.ErrDeadlineExceeded) or Close
// (ringbuf.ErrClosed). e's PSNs are reused by the next call unless buf is nil.
func (s *Source) Next(buf []psn.PSN) (Event, error) {
	if err := s.rd.ReadInto(&s.rec); err != nil {
		return Event{}, err
	}
	raw := s.rec.RawSample
	var ev kdropEvent
	if len(raw) < int(unsafe.Sizeof(ev)) {
		return Event{}, fmt.Errorf("kdrop: event of %d octets", len(raw))
	}
	ev = *(*kdropEvent)(unsafe.Pointer(&raw[0]))
	e := Event{Port: int(ev.Port), Ifindex: int(ev.Ifindex), Reason: ev.Reason, DestQP: ev.Dqp,
		Src: addrOf(ev.Family, ev.Src), Dst: addrOf(ev.Family, ev.Dst), Segments: int(ev.Segs), PSNs: buf[:0]}
	for i := 0; i < int(ev.Npsn) && i < MaxPSNs; i++ {
		e.PSNs = append(e.PSNs, psn.PSN(ev.Psns[i]))
	}
	return e, nil
}

// Lost returns the drops that found the ring buffer full since the last call, per flow.
func (s *Source) Lost() ([]Lost, error) {
	var out []Lost
	var k kdropLostKey
	var n uint64
	present := make(map[kdropLostKey]bool, len(s.lostSeen))
	it := s.objs.Lost.Iterate()
	for it.Next(&k, &n) {
		present[k] = true
		prev := s.lostSeen[k]
		if n < prev {
			prev = 0 // evicted and added again
		}
		if n > prev {
			out = append(out, Lost{Port: int(k.Port), Reason: k.Reason, DestQP: k.Dqp,
				Src: addrOf(k.Family, k.Src), Dst: addrOf(k.Family, k.Dst), Count: n - prev})
		}
		s.lostSeen[k] = n
	}
	if err := it.Err(); err != nil {
		return out, fmt.Errorf("kdrop: reading lost drops: %w", err)
	}
	for k := range s.lostSeen {
		if !present[k] {
			delete(s.lostSeen, k)
		}
	}
	return out, nil
}

// Counters reads the program's counters.
func (s *Source) Counters() (Counters, error) {
	var c Counters
	for i, dst := range []*uint64{&c.Matched, &c.Events, &c.EventsLost, &c.NotRoCE, &c.SegmentsLost, &c.NotLinear, &c.GSO} {
		var per []uint64
		if err := s.objs.Stats.Lookup(uint32(i), &per); err != nil {
			return c, fmt.Errorf("kdrop: counters: %w", err)
		}
		for _, v := range per {
			*dst += v
		}
	}
	return c, nil
}

// Program is the attached program (for ebpf.EnableStats figures).
func (s *Source) Program() *ebpf.Program {
	if s.objs.KfreeSkbDyn != nil {
		return s.objs.KfreeSkbDyn
	}
	if s.objs.KfreeSkbBtf != nil {
		return s.objs.KfreeSkbBtf
	}
	return s.objs.KfreeSkbTp
}

// Close detaches the program and releases everything; a Next waiting returns.
func (s *Source) Close() error {
	var errs []error
	if s.rd != nil {
		errs = append(errs, s.rd.Close())
	}
	if s.link != nil {
		errs = append(errs, s.link.Close())
	}
	errs = append(errs, s.objs.Close())
	return errors.Join(errs...)
}

// Reasons returns the running kernel's drop reasons by name, without the SKB_DROP_REASON_
// prefix (QDISC_DROP, FQ_FLOW_LIMIT, ...), read from its BTF.
func Reasons() (map[string]uint32, error) {
	spec, err := btf.LoadKernelSpec()
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrNoBTF, err)
	}
	var e *btf.Enum
	if err := spec.TypeByName("skb_drop_reason", &e); err != nil {
		return nil, fmt.Errorf("kdrop: the kernel's BTF has no enum skb_drop_reason: %w", err)
	}
	out := make(map[string]uint32, len(e.Values))
	for _, v := range e.Values {
		if name, ok := cutPrefix(v.Name); ok {
			out[name] = uint32(v.Value)
		}
	}
	return out, nil
}

// NetnsCookie returns the cookie of the calling thread's network namespace (SO_NETNS_COOKIE,
// Linux 5.14), the same the program reads from a device's namespace.
func NetnsCookie() (uint64, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("kdrop: netns cookie: %w", err)
	}
	defer unix.Close(fd)
	var c uint64
	l := uint32(unsafe.Sizeof(c))
	_, _, e := unix.Syscall6(unix.SYS_GETSOCKOPT, uintptr(fd), unix.SOL_SOCKET, unix.SO_NETNS_COOKIE,
		uintptr(unsafe.Pointer(&c)), uintptr(unsafe.Pointer(&l)), 0)
	if e != 0 {
		return 0, fmt.Errorf("kdrop: SO_NETNS_COOKIE (Linux 5.14 or later): %w", e)
	}
	return c, nil
}

// InNetns runs fn on a thread of its own in the network namespace at path (such as
// /run/netns/router); "" runs it on the caller's goroutine. Sockets fn opens stay in that
// namespace.
func InNetns(path string, fn func() error) error {
	if path == "" {
		return fn()
	}
	done := make(chan error)
	go func() {
		// The thread is never unlocked: it ends with the goroutine instead of going back to
		// the pool in the other namespace.
		runtime.LockOSThread()
		f, err := os.Open(path)
		if err != nil {
			done <- fmt.Errorf("network namespace: %w", err)
			return
		}
		err = unix.Setns(int(f.Fd()), unix.CLONE_NEWNET)
		f.Close()
		if err != nil {
			done <- fmt.Errorf("entering the network namespace %s: %w", path, err)
			return
		}
		done <- fn()
	}()
	return <-done
}
