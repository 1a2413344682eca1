package wire

import "github.com/crem-project/crem/psn"

// bitmap reads the ceil(k/32) words of a k-position bitmap.
func (r *reader) bitmap(k uint8, field string) psn.Bitmap {
	s := r.take(psn.Words(int(k))*4, field)
	if s == nil {
		return psn.Bitmap{}
	}
	bm, _, _ := psn.ParseBitmap(s, int(k)) // s has exactly the words needed
	return bm
}

// checkBitmap refuses positions at or beyond k, which the bitmap's words can hold but a block of
// k positions does not have, and, unless allowEmpty, an empty set.
func checkBitmap(t Type, field string, bm *psn.Bitmap, k uint8, allowEmpty bool) error {
	if !allowEmpty && bm.Empty() {
		return fieldErr(t, field, "no position set")
	}
	if bm.Beyond(int(k)) {
		for j := int(k); j < psn.MaxPositions; j++ {
			if bm.Has(j) {
				return fieldErr(t, field, "position %d is at or beyond k = %d", j, k)
			}
		}
	}
	return nil
}

// checkK refuses a k outside 1..255 (the draft's range; 255 is the largest an octet holds).
func checkK(t Type, k uint8) error {
	if k == 0 {
		return fieldErr(t, "k", "0 is out of range 1..255")
	}
	return nil
}

// checkPSN refuses a PSN that does not fit the 24-bit field.
func checkPSN(t Type, field string, p psn.PSN) error {
	if p > psn.Mask {
		return fieldErr(t, field, "%#x exceeds 24 bits", uint32(p))
	}
	return nil
}
