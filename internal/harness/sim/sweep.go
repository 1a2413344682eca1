package sim

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"runtime"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"
)

// Cell is one (scheme, drop rate, message size) of a sweep.
type Cell struct {
	Scheme   Scheme
	DropRate float64
	Size     int64
}

// Sweep is a scenario run over schemes, drop rates and sizes.
type Sweep struct {
	Scenario Scenario
	Schemes  []Scheme
	Seed     uint64
	// Shard and Shards select a deterministic slice of the cells: those whose index is Shard
	// modulo Shards. Shards 0 or 1 runs everything.
	Shard, Shards int
	// Workers run trials in parallel (GOMAXPROCS when 0); MemoryBudget bounds the estimated
	// memory of the trials running at once (3 GiB when 0).
	Workers      int
	MemoryBudget int64
	// MemoryLimit refuses a sweep with a trial whose estimated memory exceeds it (16 GiB when
	// 0), rather than exhausting the machine: CREM at 8 GiB needs more (docs/performance.md).
	MemoryLimit int64
	// Progress, if set, is called after each trial with the trials done and the total.
	Progress func(done, total int)
	// Overrides are the scenario's values the user changed (flag name to value as given, in
	// canonical form), copied into every Result so a report says what it ran.
	Overrides map[string]string
}

// Cells returns every cell of the sweep in report order (scheme, drop rate, size), before
// sharding.
func (s *Sweep) Cells() []Cell {
	type ds struct {
		d float64
		n int64
	}
	var grid []ds
	for _, d := range s.Scenario.DropRates {
		for _, n := range s.Scenario.Sizes {
			grid = append(grid, ds{d, n})
		}
	}
	for _, e := range s.Scenario.Extra {
		if !slices.Contains(grid, ds{e.DropRate, e.Size}) {
			grid = append(grid, ds{e.DropRate, e.Size})
		}
	}
	slices.SortStableFunc(grid, func(a, b ds) int {
		return cmp.Or(cmp.Compare(a.d, b.d), cmp.Compare(a.n, b.n))
	})
	var out []Cell
	for _, sc := range s.Schemes {
		for _, g := range grid {
			out = append(out, Cell{Scheme: sc, DropRate: g.d, Size: g.n})
		}
	}
	return out
}

// ShardCells returns the cells of this shard.
func (s *Sweep) ShardCells() []Cell {
	all := s.Cells()
	if s.Shards <= 1 {
		return all
	}
	var out []Cell
	for i, c := range all {
		if i%s.Shards == s.Shard {
			out = append(out, c)
		}
	}
	return out
}

// TrialSeed is the seed of one trial of a (drop rate, size): the same for every scheme, so all
// schemes meet the same loss draws.
func TrialSeed(seed uint64, drop float64, size int64, trial int) uint64 {
	h := fnv.New64a()
	fmt.Fprintf(h, "%d/%g/%d/%d", seed, drop, size, trial)
	return mix(h.Sum64(), 7)
}

// params returns the trial parameters of a cell.
func (s *Sweep) params(c Cell, trial int) Params {
	sc := s.Scenario
	return Params{Scheme: c.Scheme, Rate: sc.Rate, RTT: sc.RTT, MTU: sc.MTU, Size: c.Size,
		DropRate: c.DropRate, Loss: sc.Loss, BurstLen: sc.BurstLen, PolicyBurst: sc.PolicyBurst,
		Seed: TrialSeed(s.Seed, c.DropRate, c.Size, trial)}
}

// memEstimate is a trial's estimated peak memory, with the collector's headroom: the queue
// pairs' per-PSN state (some 26 octets a packet of the message, R18), the packets in flight
// (two RTTs at the rate, stored small, S6: some 400 octets each on the links and in the
// engines), the synthetic regions, and for CREM the sender's record of every packet (S12) and
// the engines' windows (S16). Measured (HeapInuse at peak): 8 GiB rc schemes 0.1 GiB, 8 GiB
// crem+tcaeth 0.45 GiB and ec 0.65 GiB (its repair queued on the link).
func memEstimate(p Params) int64 {
	pk, octets := writeShape(p.Size, p.MTU)
	perPkt := float64(octets) / float64(pk) * 8 / float64(p.Rate)
	inflight := min(pk, int64(2*p.RTT.Seconds()/perPkt)+1)
	est := pk*64 + inflight*400 + 2*min(p.Size, DefaultPeriod) + 32<<20
	if p.Scheme.CREM != "" {
		est += pk*200 + inflight*400
	}
	return est
}

// Check returns what Run would refuse before running any trial: no trials, a shard outside
// its count, a cell whose parameters no trial takes (an MTU that is not an RDMA MTU, a message
// beyond a quarter of the PSN space), a trial whose estimated memory exceeds MemoryLimit.
func (s *Sweep) Check() error {
	if s.Scenario.Trials <= 0 {
		return fmt.Errorf("sim: sweep: %d trials", s.Scenario.Trials)
	}
	if s.Shards > 1 && (s.Shard < 0 || s.Shard >= s.Shards) {
		return fmt.Errorf("sim: sweep: shard %d of %d", s.Shard, s.Shards)
	}
	limit := s.MemoryLimit
	if limit <= 0 {
		limit = 16 << 30
	}
	for _, c := range s.ShardCells() {
		p := s.params(c, 0)
		if err := p.validate(); err != nil {
			return fmt.Errorf("sim: sweep: cell %s drop %g size %d: %w", c.Scheme.Name, c.DropRate, c.Size, err)
		}
		if need := memEstimate(p); need > limit {
			return fmt.Errorf("sim: sweep: %s at %d octets needs some %d MiB per trial, above the limit of %d MiB",
				c.Scheme.Name, c.Size, need>>20, limit>>20)
		}
	}
	return nil
}

// TrialError is how a sweep reports a trial that failed once it ran: the engines returned an
// error, the message's WRITE completed with an error status (retries exhausted), or the
// responder's memory did not match the message after completion. The sweep is deterministic:
// the same trial fails again when run again. Every other error of Run is about the sweep as
// configured (trials, shard, a cell's parameters, the memory limit) and comes before any trial
// runs.
type TrialError struct {
	Cell  Cell
	Trial int
	Err   error
}

func (e *TrialError) Error() string {
	return fmt.Sprintf("cell %s drop %g size %d trial %d: %v", e.Cell.Scheme.Name, e.Cell.DropRate, e.Cell.Size, e.Trial, e.Err)
}

func (e *TrialError) Unwrap() error { return e.Err }

// Run runs the shard's cells and returns one Result per cell, in cell order. A failed trial
// fails the sweep with a *TrialError (errors.As finds it); no other error comes from a trial.
func (s *Sweep) Run() ([]Result, error) { return s.RunContext(context.Background()) }

// RunContext is Run, cut short when ctx is cancelled: the trials running then are cancelled
// (sim.ErrCancelled, no outcome), no other starts, and each cell's Result summarises the trials
// that completed, marked Interrupted with the trials it planned and those cancelled (a cell
// with no trial done has Trials 0). The error is then nil: nothing failed.
func (s *Sweep) RunContext(ctx context.Context) ([]Result, error) {
	if err := s.Check(); err != nil {
		return nil, err
	}
	sc := s.Scenario
	cells := s.ShardCells()
	outs := make([][]Outcome, len(cells))
	type job struct{ cell, trial int }
	var jobs []job
	for i, c := range cells {
		n := sc.Trials
		if c.Size >= 8*gib {
			n = max(1, min(n, 10)) // the largest messages: 10 trials, as the goals allow
		}
		outs[i] = make([]Outcome, n)
		for t := range n {
			jobs = append(jobs, job{i, t})
		}
	}
	workers := s.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	budget := s.MemoryBudget
	if budget <= 0 {
		budget = 3 << 30
	}
	var stop atomic.Bool
	defer context.AfterFunc(ctx, func() { stop.Store(true) })()
	ran := make([][]bool, len(cells))
	cancelled := make([]int, len(cells))
	for i := range cells {
		ran[i] = make([]bool, len(outs[i]))
	}
	var (
		mu      sync.Mutex
		cond    = sync.NewCond(&mu)
		inUse   int64
		running int
		next    int
		done    int
		errs    []error
		wg      sync.WaitGroup
	)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rs := &Regions{Seed: mix(s.Seed, 5)}
			defer rs.Free()
			for {
				mu.Lock()
				if ctx.Err() != nil {
					stop.Store(true) // at once, not when AfterFunc's goroutine runs
				}
				if next >= len(jobs) || len(errs) > 0 || stop.Load() {
					mu.Unlock()
					return
				}
				j := jobs[next]
				next++
				p := s.params(cells[j.cell], j.trial)
				need := min(memEstimate(p), budget)
				for running > 0 && inUse+need > budget {
					cond.Wait()
				}
				inUse += need
				running++
				mu.Unlock()

				p.Regions, p.Stop = rs, &stop
				o, err := Run(p)

				mu.Lock()
				inUse -= need
				running--
				cond.Broadcast()
				switch {
				case errors.Is(err, ErrCancelled):
					cancelled[j.cell]++
				case err != nil:
					errs = append(errs, &TrialError{Cell: cells[j.cell], Trial: j.trial, Err: err})
				default:
					outs[j.cell][j.trial], ran[j.cell][j.trial] = o, true
				}
				done++
				if s.Progress != nil {
					s.Progress(done, len(jobs))
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("sim: sweep: %w", err)
	}
	res := make([]Result, len(cells))
	for i, c := range cells {
		if !stop.Load() && ctx.Err() == nil {
			res[i] = Summarize(sc.Name, c, outs[i])
			continue
		}
		var done []Outcome
		for t, o := range outs[i] {
			if ran[i][t] {
				done = append(done, o)
			}
		}
		res[i] = Summarize(sc.Name, c, done)
		if len(done) < len(outs[i]) {
			res[i].Interrupted, res[i].TrialsPlanned, res[i].TrialsCancelled = true, len(outs[i]), cancelled[i]
		}
	}
	for i := range res {
		res[i].Overrides = s.Overrides
	}
	return res, nil
}

// Result is the summary of one cell: the fields of `crem sim --json`.
type Result struct {
	Scenario             string  `json:"scenario"`
	Scheme               string  `json:"scheme"`
	DropRate             float64 `json:"drop_rate"`
	MessageBytes         int64   `json:"message_bytes"`
	Trials               int     `json:"trials"`
	IdealS               float64 `json:"ideal_s"`
	MeanS                float64 `json:"mean_s"`
	P50S                 float64 `json:"p50_s"`
	P99S                 float64 `json:"p99_s"`
	P999S                float64 `json:"p999_s"`
	Overhead             float64 `json:"overhead"`
	RepairOverhead       float64 `json:"repair_overhead"`
	SecondRoundShare     float64 `json:"second_round_share"`
	RetransmittedPackets float64 `json:"retransmitted_packets"`
	ReversePackets       float64 `json:"reverse_packets"`
	// Interrupted marks a cell of a sweep cut short (RunContext): Trials counts the trials that
	// completed, TrialsPlanned those the cell would have run, TrialsCancelled those running at
	// the cancel (neither failed nor incomplete); the figures are over the completed trials.
	Interrupted     bool `json:"interrupted,omitempty"`
	TrialsPlanned   int  `json:"trials_planned,omitempty"`
	TrialsCancelled int  `json:"trials_cancelled,omitempty"`
	// Incomplete counts trials that had not completed within the time limit; their completion
	// time is the limit, so the statistics are lower bounds when it is not 0.
	Incomplete int `json:"incomplete"`
	// RecoveryMeanS and RecoveryP99S are the mean and the 99th percentile (nearest rank) of the
	// recovery time of CREM blocks that lost more source packets than their ordinary repair, over
	// every such block of every trial, and RecoveryBlocks is how many there were (S20). All three
	// are omitted when there was none, and always for the schemes without CREM (no blocks).
	RecoveryMeanS  float64 `json:"recovery_mean_s,omitempty"`
	RecoveryP99S   float64 `json:"recovery_p99_s,omitempty"`
	RecoveryBlocks int     `json:"recovery_blocks,omitempty"`
	// Overrides are the scenario's values the command line changed (Sweep.Overrides): flag name
	// to value, e.g. "rtt": "20ms", "rate": "10Gbit/s". Absent when the scenario ran as defined.
	Overrides map[string]string `json:"overrides,omitempty"`
	// Completions are the trials' completion times in seconds, in trial order (CSV and merge).
	Completions []float64 `json:"-"`
	// KM is CREM's (k, m) over time in the first trial.
	KM []KM `json:"-"`
}

// Summarize folds a cell's trials into its Result.
func Summarize(scenario string, c Cell, outs []Outcome) Result {
	r := Result{Scenario: scenario, Scheme: c.Scheme.Name, DropRate: c.DropRate, MessageBytes: c.Size,
		Trials: len(outs)}
	if len(outs) == 0 {
		return r
	}
	var wire, repair, retx, rev float64
	second := 0
	var rec []float64
	for _, o := range outs {
		for _, d := range o.Recovery.Times {
			rec = append(rec, d.Seconds())
		}
		r.Completions = append(r.Completions, o.Completion.Seconds())
		wire += float64(o.WireOctets)
		repair += float64(o.RepairOctets)
		retx += float64(o.Retransmitted)
		rev += float64(o.Reverse)
		if o.SecondRound {
			second++
		}
		if o.Incomplete {
			r.Incomplete++
		}
		r.IdealS = o.Ideal.Seconds()
	}
	n := float64(len(outs))
	r.fillTimes()
	r.Overhead = wire / n / float64(c.Size)
	r.RepairOverhead = repair / n / float64(c.Size)
	r.SecondRoundShare = float64(second) / n
	r.RetransmittedPackets = retx / n
	r.ReversePackets = rev / n
	r.KM = outs[0].KM
	if len(rec) > 0 {
		sort.Float64s(rec)
		var sum float64
		for _, v := range rec {
			sum += v
		}
		r.RecoveryMeanS, r.RecoveryP99S, r.RecoveryBlocks = sum/float64(len(rec)), quantile(rec, 0.99), len(rec)
	}
	return r
}

// fillTimes computes the mean and quantiles from Completions.
func (r *Result) fillTimes() {
	s := slices.Clone(r.Completions)
	sort.Float64s(s)
	var sum float64
	for _, v := range s {
		sum += v
	}
	r.MeanS = sum / float64(len(s))
	r.P50S, r.P99S, r.P999S = quantile(s, 0.5), quantile(s, 0.99), quantile(s, 0.999)
}

// quantile is the nearest-rank quantile of sorted values.
func quantile(s []float64, q float64) float64 {
	if len(s) == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(len(s)))) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// Ideal returns the cell's lossless completion time.
func (r *Result) Ideal() time.Duration { return time.Duration(r.IdealS * float64(time.Second)) }
