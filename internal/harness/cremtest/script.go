package cremtest

import "time"

// Drop returns a filter that drops the packets of one direction and kind with the given
// numbers (Packet.N), and lets everything else through: "drop this".
func Drop(d Dir, k Kind, ns ...int) Filter {
	set := make(map[int]bool, len(ns))
	for _, n := range ns {
		set[n] = true
	}
	return func(p *Packet) Fate { return Fate{Drop: p.Dir == d && p.Kind == k && set[p.N]} }
}

// Delay returns a filter that holds packet n of one direction and kind back by extra: "delay
// that", which reorders it behind the packets sent after it.
func Delay(d Dir, k Kind, n int, extra time.Duration) Filter {
	return func(p *Packet) Fate {
		if p.Dir == d && p.Kind == k && p.N == n {
			return Fate{Delay: extra}
		}
		return Fate{}
	}
}

// Duplicate returns a filter that sends packet n of one direction and kind twice.
func Duplicate(d Dir, k Kind, n int) Filter {
	return func(p *Packet) Fate {
		if p.Dir == d && p.Kind == k && p.N == n {
			return Fate{Duplicate: 1}
		}
		return Fate{}
	}
}

// Chain applies filters in order: a packet is dropped if any drops it; delays and duplicates
// add up; CE marks combine.
func Chain(fs ...Filter) Filter {
	return func(p *Packet) Fate {
		var out Fate
		for _, f := range fs {
			if f == nil {
				continue
			}
			r := f(p)
			out.Drop = out.Drop || r.Drop
			out.Delay += r.Delay
			out.Duplicate += r.Duplicate
			out.CE = out.CE || r.CE
		}
		return out
	}
}
