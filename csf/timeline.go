package csf

import (
	"time"

	"github.com/crem-project/crem/policy"
)

// KMPoint is one change of the code the Sender uses (P11): from AtS on (seconds on the Sender's
// clock), blocks carry K positions and M ordinary repair symbols (the configuration in force),
// and the latest message whose length it learned was planned with blocks of MessageK and TailM
// repair symbols on its critical tail (the cost rule, P9; 0 when none).
type KMPoint struct {
	AtS      float64 `json:"at_s"`
	K        int     `json:"k"`
	M        int     `json:"m"`
	MessageK int     `json:"message_k,omitempty"`
	TailM    int     `json:"tail_m,omitempty"`
}

// maxKMPoints bounds the timeline; changes beyond it are counted (Stats.KMPointsDropped).
const maxKMPoints = 256

// noteKM appends the code in force at now to the timeline when it differs from the last entry.
func (s *Sender) noteKM(now time.Duration) {
	if !s.haveCfg {
		return
	}
	p := KMPoint{AtS: now.Seconds(), K: s.cur.K, M: s.cur.M}
	if s.msg && s.o.rule == policy.RuleCost {
		p.MessageK, p.TailM = s.msgK, s.cur.M+s.msgExtra
	}
	if n := len(s.kmLine); n > 0 {
		l := s.kmLine[n-1]
		if l.K == p.K && l.M == p.M && l.MessageK == p.MessageK && l.TailM == p.TailM {
			return
		}
	}
	if len(s.kmLine) >= maxKMPoints {
		s.stats.KMPointsDropped++
		return
	}
	s.kmLine = append(s.kmLine, p)
}

// KMTimeline returns the codes the Sender used over time, oldest first (P11).
func (s *Sender) KMTimeline() []KMPoint { return append([]KMPoint(nil), s.kmLine...) }
