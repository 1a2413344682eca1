package udpproxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/crem-project/crem/netem"
)

// Defaults for the zero fields of Config.
const (
	DefaultMaxClients  = 64
	DefaultIdleTimeout = 2 * time.Minute
	DefaultBatch       = 32
)

// maxDatagram is the largest UDP payload a socket can hand over; reads use buffers this large,
// so no datagram is ever cut short.
const maxDatagram = 65535

// Config describes a proxy.
type Config struct {
	// Listen is the address clients send to, host:port ("127.0.0.1:9000", ":9000"; port 0 picks
	// one, see Proxy.Addr).
	Listen string
	// Forward is the address datagrams from clients are forwarded to; its answers go back to
	// the client they answer.
	Forward string
	// Routes forwards the datagrams of the clients it names to an address of their own instead
	// of Forward, through the same links (one queue and one delay for every client): the
	// answers from there go back to that client. The addresses must be of Forward's family.
	Routes map[netip.AddrPort]netip.AddrPort
	// ForwardLink impairs the datagrams from the clients to Forward; ReverseLink those coming
	// back. Each is a netem.Config whose Loss model the proxy's link then owns; give each
	// direction its own model (and seed). OnDrop, if set, is called as well as the proxy's own
	// drop accounting.
	ForwardLink, ReverseLink netem.Config
	// MaxClients bounds the clients served at once, each with its own upstream socket; a new
	// client beyond it evicts the one idle longest. 0 means DefaultMaxClients.
	MaxClients int
	// IdleTimeout closes a client's upstream socket after this long without a datagram in
	// either direction. 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// Drain is how long Run, once its context is done, goes on delivering the datagrams still
	// in flight; those left after it are counted as Unsent. 0 means the larger one-way delay
	// plus jitter plus reorder delay, plus one second.
	Drain time.Duration
	// Batch is how many datagrams one system call reads or writes. 0 means DefaultBatch.
	Batch int
	// DropLog, if set, receives one JSON object per line for every datagram the links drop
	// (see the package documentation).
	DropLog io.Writer
	// Pcap, if set, receives a classic pcap file of every datagram forwarded or dropped.
	Pcap io.Writer
	// Logger receives the proxy's diagnostics; nil discards them.
	Logger *slog.Logger
	// ForgeDefinitions makes the forward direction an on-path forger of CREM block
	// definitions: ahead of the first REPAIR of each block, a REPAIR from the same client with
	// the same Flow ID and Config ID that defines the block another way (half its k, a present
	// position cleared, or the next block's), with random symbol octets, seeded by
	// ForwardLink.Seed. For tests of a CRF's defence (it must never deliver such a solve, nor
	// lose the genuine definition to it); DirStats.Forged counts them.
	ForgeDefinitions bool
	// Report, if set, makes the proxy a CREM Path Reporter for the RoCEv2 datagrams it
	// carries (see the package documentation). It must ask for drops, marking or both.
	Report *ReportConfig
}

// Proxy is a running impairment proxy. Build it with New, run it with Run.
type Proxy struct {
	cfg     Config
	logger  *slog.Logger
	start   time.Time
	listen  *net.UDPConn
	listen6 bool
	lr      *batchIO // the listen reader's
	lw      *batchIO // the reverse loop's
	fwdAddr netip.AddrPort
	routes  map[netip.AddrPort]netip.AddrPort // client -> its own forward address (Config.Routes)
	fwdNet  string

	fwd, rev *direction
	clients  clientTable
	drops    *dropLog
	pcap     *pcapLog
	pools    pools
	rep      *reportLoop // nil without Config.Report

	stopping atomic.Bool
	ran      atomic.Bool    // Run was called
	live     atomic.Bool    // start is set
	wg       sync.WaitGroup // client readers
	final    atomic.Pointer[Stats]
}

// New checks cfg, binds the listening socket and builds both links; nothing moves until Run.
func New(cfg Config) (*Proxy, error) {
	if cfg.Listen == "" {
		return nil, errors.New("udpproxy: no listen address")
	}
	if cfg.Forward == "" {
		return nil, errors.New("udpproxy: no forward address")
	}
	if cfg.MaxClients < 0 || cfg.IdleTimeout < 0 || cfg.Drain < 0 || cfg.Batch < 0 {
		return nil, errors.New("udpproxy: negative client limit, idle timeout, drain time or batch")
	}
	if cfg.MaxClients == 0 {
		cfg.MaxClients = DefaultMaxClients
	}
	if cfg.IdleTimeout == 0 {
		cfg.IdleTimeout = DefaultIdleTimeout
	}
	if cfg.Batch == 0 {
		cfg.Batch = DefaultBatch
	}
	if cfg.Drain == 0 {
		cfg.Drain = max(cfg.ForwardLink.Delay+cfg.ForwardLink.Jitter+cfg.ForwardLink.ReorderDelay,
			cfg.ReverseLink.Delay+cfg.ReverseLink.Jitter+cfg.ReverseLink.ReorderDelay) + time.Second
	}
	p := &Proxy{cfg: cfg, logger: cfg.Logger}
	if p.logger == nil {
		p.logger = slog.New(slog.DiscardHandler)
	}

	fa, err := net.ResolveUDPAddr("udp", cfg.Forward)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: forward address %q: %w", cfg.Forward, err)
	}
	if fa.Port == 0 || fa.IP == nil || fa.IP.IsUnspecified() {
		return nil, fmt.Errorf("udpproxy: forward address %q: need a host and a port", cfg.Forward)
	}
	p.fwdAddr = fa.AddrPort()
	p.fwdAddr = netip.AddrPortFrom(p.fwdAddr.Addr().Unmap(), p.fwdAddr.Port())
	p.fwdNet = "udp6"
	if p.fwdAddr.Addr().Is4() {
		p.fwdNet = "udp4"
	}
	p.routes = make(map[netip.AddrPort]netip.AddrPort, len(cfg.Routes))
	for c, to := range cfg.Routes {
		c = netip.AddrPortFrom(c.Addr().Unmap(), c.Port())
		to = netip.AddrPortFrom(to.Addr().Unmap(), to.Port())
		if !c.IsValid() || !to.IsValid() || to.Port() == 0 || to.Addr().IsUnspecified() || to.Addr().Is4() != p.fwdAddr.Addr().Is4() {
			return nil, fmt.Errorf("udpproxy: route %v -> %v: want a client address and a forward address with a port, of the forward address's family", c, to)
		}
		p.routes[c] = to
	}

	p.fwd, err = newDirection(p, "forward", cfg.ForwardLink)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: forward link: %w", err)
	}
	if cfg.ForgeDefinitions {
		p.fwd.forger = newForger(cfg.ForwardLink.Seed)
	}
	p.rev, err = newDirection(p, "reverse", cfg.ReverseLink)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: reverse link: %w", err)
	}

	la, err := net.ResolveUDPAddr("udp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: listen address %q: %w", cfg.Listen, err)
	}
	network := "udp"
	switch {
	case la.IP == nil || la.IP.IsUnspecified() && la.IP.To4() == nil:
	case la.IP.To4() != nil:
		network = "udp4"
	default:
		network = "udp6"
	}
	p.listen, err = net.ListenUDP(network, la)
	if err != nil {
		return nil, fmt.Errorf("udpproxy: listening on %q: %w", cfg.Listen, err)
	}
	if err := p.setupListen(); err != nil {
		p.listen.Close()
		return nil, fmt.Errorf("udpproxy: listening on %q: %w", cfg.Listen, err)
	}
	p.clients.m = make(map[netip.AddrPort]*client)
	if cfg.DropLog != nil {
		p.drops = newDropLog(cfg.DropLog)
	}
	if cfg.Pcap != nil {
		p.pcap, err = newPcapLog(cfg.Pcap)
		if err != nil {
			p.listen.Close()
			return nil, fmt.Errorf("udpproxy: %w", err)
		}
	}
	if cfg.Report != nil {
		if err := p.setupReport(*cfg.Report); err != nil {
			p.listen.Close()
			return nil, fmt.Errorf("udpproxy: %w", err)
		}
	}
	return p, nil
}

func (p *Proxy) setupReport(cfg ReportConfig) error {
	var err error
	if p.rep, err = newReportLoop(p, cfg); err != nil {
		return err
	}
	if cfg.Marking > 0 {
		for _, d := range []*direction{p.fwd, p.rev} {
			if d.mark, err = newMarking(p.rep.cfg, d.link.Config()); err != nil {
				p.rep.conn.Close()
				return err
			}
		}
	}
	return nil
}

// ReportAddr returns the address of the reporter's socket, where every PATH_REPORT comes
// from; the zero value without Config.Report.
func (p *Proxy) ReportAddr() netip.AddrPort {
	if p.rep == nil {
		return netip.AddrPort{}
	}
	return p.rep.addr()
}

// socketBuffer is the receive and send buffer the proxy asks for on each socket (the kernel
// caps it at net.core.rmem_max and wmem_max): bursts must wait in the emulated queue, not
// overflow the socket.
const socketBuffer = 4 << 20

func (p *Proxy) setupListen() error {
	p.listen.SetReadBuffer(socketBuffer)
	p.listen.SetWriteBuffer(socketBuffer)
	var err error
	if p.listen6, err = socketIs6(p.listen); err != nil {
		return err
	}
	if err := enableTOS(p.listen, p.listen6); err != nil {
		return err
	}
	if p.lr, err = newBatchIO(p.listen, p.cfg.Batch, p.listen6, false); err != nil {
		return err
	}
	if p.lw, err = newBatchIO(p.listen, p.cfg.Batch, p.listen6, false); err != nil {
		return err
	}
	return nil
}

// Close releases the listening socket of a proxy that will not be run. Run closes everything
// itself; call Close only instead of Run.
func (p *Proxy) Close() error {
	if p.ran.Load() {
		return nil
	}
	if p.rep != nil {
		p.rep.conn.Close()
	}
	return p.listen.Close()
}

// Addr returns the address the proxy listens on.
func (p *Proxy) Addr() netip.AddrPort {
	a := p.listen.LocalAddr().(*net.UDPAddr).AddrPort()
	return netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
}

// ForwardAddr returns the address datagrams are forwarded to.
func (p *Proxy) ForwardAddr() netip.AddrPort { return p.fwdAddr }

// now is the proxy's clock: monotonic time since Run started, what the links are fed.
func (p *Proxy) now() time.Duration { return time.Since(p.start) }

// Run forwards datagrams until ctx is done, then stops reading, delivers what is still in
// flight for up to Config.Drain, closes every socket and returns. It returns an error only when
// the proxy could not run at all; failures of single datagrams are counted. Run may be called
// once.
func (p *Proxy) Run(ctx context.Context) error {
	if !p.ran.CompareAndSwap(false, true) {
		return errors.New("udpproxy: Run called twice")
	}
	p.start = time.Now()
	p.live.Store(true) // publishes start to Stats
	if p.rep != nil {
		go p.rep.run()
	}
	p.fwd.start()
	p.rev.start()

	listenDone := make(chan struct{})
	go func() {
		defer close(listenDone)
		p.readListen()
	}()
	janitorDone := make(chan struct{})
	go func() {
		defer close(janitorDone)
		p.janitor(ctx)
	}()

	<-ctx.Done()
	p.stopping.Store(true)
	<-janitorDone
	// Stop the readers: the listening one first, since it is the one that opens clients.
	p.listen.SetReadDeadline(time.Unix(1, 0))
	<-listenDone
	close(p.fwd.in)
	p.clients.mu.Lock()
	for _, c := range p.clients.m {
		c.conn.SetReadDeadline(time.Unix(1, 0))
	}
	p.clients.mu.Unlock()
	p.wg.Wait()
	close(p.rev.in)
	<-p.fwd.done
	<-p.rev.done
	if p.rep != nil {
		// The directions have handed over their last drops and measurements.
		close(p.rep.quit)
		<-p.rep.done
	}

	p.clients.mu.Lock()
	for _, c := range p.clients.m {
		c.conn.Close()
	}
	p.clients.mu.Unlock()
	p.listen.Close()
	s := p.Stats()
	p.final.Store(&s)
	var errs []error
	if p.drops != nil {
		errs = append(errs, p.drops.flush())
	}
	if p.pcap != nil {
		errs = append(errs, p.pcap.flush())
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("udpproxy: %w", err)
	}
	return nil
}

// janitor closes idle clients and flushes the logs now and then.
func (p *Proxy) janitor(ctx context.Context) {
	tick := min(max(p.cfg.IdleTimeout/4, 10*time.Millisecond), time.Second)
	t := time.NewTicker(tick)
	defer t.Stop()
	dropWarned, pcapWarned := false, false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		p.expireClients(p.now() - p.cfg.IdleTimeout)
		// A log's error is sticky: warn once; Run returns it in the end.
		if p.drops != nil && !dropWarned {
			if err := p.drops.flush(); err != nil {
				p.logger.Warn("drop log", "err", err)
				dropWarned = true
			}
		}
		if p.pcap != nil && !pcapWarned {
			if err := p.pcap.flush(); err != nil {
				p.logger.Warn("pcap", "err", err)
				pcapWarned = true
			}
		}
	}
}

// readListen reads what clients send and hands it to the forward direction.
func (p *Proxy) readListen() {
	ms := newScratch(p.cfg.Batch)
	var last *client
	for {
		n, err := p.lr.read(ms)
		if err != nil {
			if p.stopping.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if !transient(err) {
				p.logger.Warn("reading from clients", "err", err)
				time.Sleep(10 * time.Millisecond) // never spin on a persistent error
			}
			continue
		}
		now := p.now()
		for i := range ms[:n] {
			m := &ms[i]
			if m.trunc {
				continue // cannot happen with maxDatagram buffers; never forward a cut datagram
			}
			c := last
			if c == nil || c.addr != m.addr || c.closed.Load() {
				if c, err = p.client(m.addr, now); err != nil {
					p.fwd.rejected(len(m.buf))
					p.logger.Warn("no upstream socket for client", "client", m.addr, "err", err)
					continue
				}
				last = c
			}
			c.last.Store(int64(now))
			p.fwd.in <- p.pools.newPkt(m, c)
		}
	}
}

// readClient reads what the forward address answers to one client and hands it to the
// reverse direction.
func (p *Proxy) readClient(c *client) {
	defer p.wg.Done()
	ms := newScratch(min(p.cfg.Batch, 8))
	for {
		n, err := c.rio.read(ms)
		if err != nil {
			if p.stopping.Load() || c.closed.Load() || errors.Is(err, net.ErrClosed) {
				return
			}
			if !transient(err) {
				p.logger.Warn("reading from the forward address", "client", c.addr, "err", err)
				time.Sleep(10 * time.Millisecond)
			}
			continue
		}
		now := p.now()
		c.last.Store(int64(now))
		for i := range ms[:n] {
			m := &ms[i]
			if !m.trunc && (!m.addr.IsValid() || m.addr == c.fwd) {
				p.rev.in <- p.pools.newPkt(m, c)
			}
		}
	}
}

// transient reports errors that a datagram socket reports and then forgets: an ICMP port
// unreachable for an earlier datagram on a connected socket, and the like.
func transient(err error) bool {
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.EHOSTUNREACH) ||
		errors.Is(err, syscall.ENETUNREACH) || errors.Is(err, os.ErrDeadlineExceeded)
}

// newScratch returns a batch of read buffers, each large enough for any datagram.
func newScratch(n int) []dgram {
	ms := make([]dgram, n)
	for i := range ms {
		ms[i].buf = make([]byte, maxDatagram)
	}
	return ms
}

// Stats returns the proxy's counters; safe to call at any time from any goroutine. After Run
// has returned it returns the final counts.
func (p *Proxy) Stats() Stats {
	if s := p.final.Load(); s != nil {
		return *s
	}
	s := Stats{
		Forward: p.fwd.stats(),
		Reverse: p.rev.stats(),
	}
	if p.live.Load() {
		s.Elapsed = p.now()
	}
	p.clients.mu.Lock()
	s.Clients = len(p.clients.m)
	p.clients.mu.Unlock()
	s.ClientsOpened = p.clients.opened.Load()
	s.ClientsEvicted = p.clients.evicted.Load()
	s.ClientsExpired = p.clients.expired.Load()
	if p.rep != nil {
		rs := p.rep.stats()
		for _, d := range []*direction{p.fwd, p.rev} {
			if d.mark != nil {
				rs.Marking = addMarking(rs.Marking, d.mark.stats())
			}
		}
		s.Report = &rs
	}
	return s
}

// Stats counts what the proxy did.
type Stats struct {
	// Elapsed is the time since Run started (until it returned).
	Elapsed time.Duration `json:"elapsed_ns"`
	// Forward counts the datagrams from clients to the forward address, Reverse the answers.
	Forward DirStats `json:"forward"`
	Reverse DirStats `json:"reverse"`
	// Clients is the number served now; ClientsOpened counts every client seen, ClientsEvicted
	// those closed to make room for a new one, ClientsExpired those closed for being idle.
	Clients        int    `json:"clients"`
	ClientsOpened  uint64 `json:"clients_opened"`
	ClientsEvicted uint64 `json:"clients_evicted"`
	ClientsExpired uint64 `json:"clients_expired"`
	// Report counts the path reporter's work; nil without Config.Report. (Left out of this
	// struct's JSON: its fields keep their Go names there; `crem netem --json` prints them
	// under "reporter".)
	Report *ReportStats `json:"-"`
}

// DirStats counts one direction. After Run has returned
//
//	Received = Forwarded + DroppedLoss + DroppedOverflow + WriteErrors + Unsent + Merged
//
// and while it runs the difference is InFlight, give or take the datagrams being handled at
// that instant.
type DirStats struct {
	Received      uint64 `json:"received"`
	ReceivedBytes uint64 `json:"received_bytes"`
	// Forwarded counts datagrams sent on after the link delivered them.
	Forwarded      uint64 `json:"forwarded"`
	ForwardedBytes uint64 `json:"forwarded_bytes"`
	// DroppedLoss counts datagrams the loss model dropped, DroppedOverflow those that found
	// the bottleneck queue full.
	DroppedLoss          uint64 `json:"dropped_loss"`
	DroppedLossBytes     uint64 `json:"dropped_loss_bytes"`
	DroppedOverflow      uint64 `json:"dropped_overflow"`
	DroppedOverflowBytes uint64 `json:"dropped_overflow_bytes"`
	// ECT counts datagrams received ECN-capable (ECT(0), ECT(1) or CE); CEMarked those the
	// queue marked CE and the proxy forwarded with CE set.
	ECT      uint64 `json:"ect"`
	CEMarked uint64 `json:"ce_marked"`
	// WriteErrors counts datagrams the proxy could not send on (the destination refused it,
	// the client's upstream socket was closed or could not be opened).
	WriteErrors uint64 `json:"write_errors"`
	// Unsent counts datagrams still in flight when the drain time after a stop ran out.
	Unsent uint64 `json:"unsent"`
	// Merged counts PATH_REPORTs from downstream reporters that the path reporter merged into
	// one of its own reports (ReportConfig.Merge) instead of forwarding them; they never
	// entered the link.
	Merged      uint64 `json:"merged"`
	MergedBytes uint64 `json:"merged_bytes"`
	// Forged counts REPAIRs the forger injected (Config.ForgeDefinitions), each also counted
	// as received.
	Forged uint64 `json:"forged,omitempty"`
	// InFlight is the number of datagrams inside the link now.
	InFlight int `json:"in_flight"`
	// PeakQueue is the largest number of datagrams the bottleneck queue held at once.
	PeakQueue int `json:"peak_queue"`
}

// Dropped is the number of datagrams the link dropped, for loss or overflow.
func (s DirStats) Dropped() uint64 { return s.DroppedLoss + s.DroppedOverflow }
