package gateway

import (
	"github.com/crem-project/crem/crf"
	"github.com/crem-project/crem/csf"
	"github.com/crem-project/crem/internal/fault"
)

// The faults of Config.Faults (tests only) reach the engines through their hooks; a deployment
// plants none, and its engines then have no hooks at all.

func csfHooks(f fault.Set) csf.Hooks {
	if f == 0 {
		return nil
	}
	return f
}

func crfHooks(f fault.Set) crf.Hooks {
	if f == 0 {
		return nil
	}
	return f
}
