package fec

// mru is a list of at most a fixed number of plans, the most recently used first. A plan
// pushed onto a full list takes over the storage of the least recently used one, so a full
// list allocates nothing more.
type mru[P any] []*P

// find moves the first plan for which match holds to the front and returns it, or nil.
func (l mru[P]) find(match func(*P) bool) *P {
	for n, p := range l {
		if match(p) {
			copy(l[1:n+1], l[:n])
			l[0] = p
			return p
		}
	}
	return nil
}

// push puts a plan at the front and returns it for the caller to fill: a new one while the list
// holds fewer than bound, else the least recently used one, its storage reused.
func (l *mru[P]) push(bound int) *P {
	var p *P
	if len(*l) < bound {
		p = new(P)
		*l = append(*l, nil)
	} else {
		p = (*l)[len(*l)-1]
	}
	copy((*l)[1:], (*l)[:len(*l)-1])
	(*l)[0] = p
	return p
}
