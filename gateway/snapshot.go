package gateway

import (
	"cmp"
	"slices"
	"time"

	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/flow"
	"github.com/crem-project/crem/pairing"
	"github.com/crem-project/crem/policy"
)

// A shard publishes what its node counts: every publishEvery while anything happens, the
// shard's goroutine (the only one that touches the node) sums its engines' counters into a
// snapshot and stores it; Stats and the metrics read the latest snapshots and never take the
// lock of the data path, so a scrape costs forwarding nothing however many flows there are,
// and the summing costs the shard the same whether scraped once a minute or in a loop.
const publishEvery = 100 * time.Millisecond

// maxLabelledFlows bounds the per-flow series: the busiest flows of each half are exposed
// (their smoothed source rate), and the sums cover all.
const maxLabelledFlows = 64

// footprintEvery is how often a shard takes its CRF's footprint for the gauges.
const footprintEvery = time.Second

// rateTau is the time constant of a flow's smoothed source rate, which ranks the busiest.
const rateTau = 10 * time.Second

// snapshot is what one shard published.
type snapshot struct {
	at       time.Duration
	sender   csf.Stats
	receiver crf.Stats
	pairing  pairing.Stats
	node     NodeStats
	flows    int // CSFs in the table
	levels   Levels
	csfRows  []csfRow // the busiest, at most maxLabelledFlows
	crfRows  []crfRow
}

type csfRow struct {
	key   flow.Key
	st    csf.Stats
	state csf.State
	rate  float64
	// What an operator watches of the flow: k of the configuration in force, m in force for
	// new blocks, the loss estimate, SRTT and the circuit breaker.
	k, m    int
	loss    float64
	srtt    time.Duration
	breaker policy.BreakerState
}

type crfRow struct {
	id   uint32
	st   crf.FlowStats
	rate float64
}

// Levels are what the gateway holds now (gauges), summed over the shards.
type Levels struct {
	CSFEstablished int // CSF sessions established: flows protected now
	CSFSessions    int // CSFs asking for a session (HELLO) or established
	CRFFlows       int // flows the CRFs serve
	// CRFPending are the sessions pending since their HELLO (unproven); CRFKeptBytes and
	// CRFHeldBytes what the CRFs keep of repair symbols and hold for in-order delivery. These
	// three are taken at most once a second (crf.Receiver.Footprint walks every block).
	CRFPending, CRFKeptBytes, CRFHeldBytes int
	// Table sizes: CSFs, CRF Flow IDs routed, nonces routed (each bounded, and expiring).
	Senders, ReceiverRoutes, Nonces int
	// Packet buffers held (free or in use): small and large.
	BuffersSmall, BuffersLarge int
}

// rates is a flow's smoothed source rate between publications.
type rates struct {
	last uint64  // sources at the last publication
	rate float64 // sources per second, smoothed
}

func (r *rates) update(sources uint64, dt time.Duration) float64 {
	if dt <= 0 {
		return r.rate
	}
	inst := float64(sources-r.last) / dt.Seconds()
	w := min(float64(dt)/float64(rateTau), 1)
	r.rate += (inst - r.rate) * w
	r.last = sources
	return r.rate
}

// rank is a flow's place in the race for the labelled series: its index (in the node's CSF
// list, or the CRF's flows), sources and smoothed rate. The rows of the busiest are filled in
// after the ranking, so a publication copies full counters of maxLabelledFlows flows only.
type rank struct {
	i       int
	sources uint64
	rate    float64
}

// busier orders rows by smoothed source rate, then by sources.
func busier(ra, rb float64, sa, sb uint64) int {
	return cmp.Or(cmp.Compare(rb, ra), cmp.Compare(sb, sa))
}

// publish sums the node's counters into a new snapshot. Only the shard's goroutine calls it
// (under sh.mu), or the caller when no shard runs.
func (sh *shard) publish(now time.Duration) {
	n := sh.n
	s := &snapshot{at: now, flows: len(n.list)}
	dt := now - sh.pubLast
	sh.pubLast, sh.pubAt, sh.dirty = now, now+publishEvery, false

	addCounters(&s.sender, &n.gone)
	ranks := sh.ranks[:0]
	for i, x := range n.list {
		cs := x.s.Stats()
		addCounters(&s.sender, &cs)
		switch x.s.State() {
		case csf.StateEstablished:
			s.levels.CSFEstablished++
			s.levels.CSFSessions++
		case csf.StateHello:
			s.levels.CSFSessions++
		}
		ranks = append(ranks, rank{i, cs.Sources, x.rate.update(cs.Sources, dt)})
	}
	top := busiest(ranks)
	s.csfRows = make([]csfRow, 0, len(top))
	for _, r := range top {
		x := n.list[r.i]
		k := 0
		if cfg, ok := x.s.Config(); ok {
			k = cfg.K
		}
		s.csfRows = append(s.csfRows, csfRow{key: x.key, st: x.s.Stats(), state: x.s.State(), rate: r.rate,
			k: k, m: x.s.M(), loss: x.s.CostPath().Loss, srtt: x.s.SRTT(), breaker: x.s.BreakerState()})
	}

	s.receiver = n.recv.Stats()
	ids := n.recv.Flows()
	s.levels.CRFFlows = len(ids)
	prev, cur := sh.crfRates, sh.crfRatesNext
	clear(cur)
	ranks = ranks[:0]
	for i, id := range ids {
		fs, _ := n.recv.FlowStats(id)
		r := prev[id]
		rate := r.update(fs.Sources, dt)
		cur[id] = r
		ranks = append(ranks, rank{i, fs.Sources, rate})
	}
	sh.crfRates, sh.crfRatesNext = cur, prev
	top = busiest(ranks)
	s.crfRows = make([]crfRow, 0, len(top))
	for _, r := range top {
		fs, _ := n.recv.FlowStats(ids[r.i])
		s.crfRows = append(s.crfRows, crfRow{id: ids[r.i], st: fs, rate: r.rate})
	}
	sh.ranks = ranks

	if now >= sh.fpAt {
		fp := n.recv.Footprint()
		sh.fp, sh.fpAt = fp, now+footprintEvery
	}
	s.levels.CRFPending, s.levels.CRFKeptBytes, s.levels.CRFHeldBytes = sh.fp.Pending, sh.fp.KeptBytes, sh.fp.HeldBytes
	s.pairing = n.pair.Stats()
	s.node = n.stats
	s.levels.Senders, s.levels.ReceiverRoutes, s.levels.Nonces = len(n.list), len(n.rxRoutes), len(n.byNonce)
	sh.snap.Store(s)
}

// busiest orders ranks and returns the maxLabelledFlows busiest.
func busiest(ranks []rank) []rank {
	slices.SortFunc(ranks, func(a, b rank) int {
		return cmp.Or(busier(a.rate, b.rate, a.sources, b.sources), cmp.Compare(a.i, b.i))
	})
	return ranks[:min(len(ranks), maxLabelledFlows)]
}

// snapshot returns the shard's latest snapshot.
func (sh *shard) snapshot() *snapshot { return sh.snap.Load() }
