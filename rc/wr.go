package rc

import "fmt"

// Op is the operation of a send work request.
type Op uint8

// The operations a requester posts.
const (
	OpSend Op = iota
	OpSendImm
	OpWrite
	OpWriteImm
	OpRead
	OpCompareSwap
	OpFetchAdd
)

func (o Op) String() string {
	switch o {
	case OpSend:
		return "SEND"
	case OpSendImm:
		return "SEND_WITH_IMM"
	case OpWrite:
		return "RDMA_WRITE"
	case OpWriteImm:
		return "RDMA_WRITE_WITH_IMM"
	case OpRead:
		return "RDMA_READ"
	case OpCompareSwap:
		return "COMPARE_SWAP"
	case OpFetchAdd:
		return "FETCH_ADD"
	}
	return fmt.Sprintf("Op(%d)", uint8(o))
}

func (o Op) hasImm() bool  { return o == OpSendImm || o == OpWriteImm }
func (o Op) isSend() bool  { return o == OpSend || o == OpSendImm }
func (o Op) isWrite() bool { return o == OpWrite || o == OpWriteImm }
func (o Op) isAtomic() bool {
	return o == OpCompareSwap || o == OpFetchAdd
}

// SendWR is a send work request. Local is the message (SEND, WRITE), the buffer READ
// responses land in (READ), or at least 8 octets that receive the original remote value
// (atomics). The caller must not touch it until the request completes.
//
// A WRITE may repeat Local: with Length larger than len(Local), the message is Length octets
// whose octet x is Local[x mod len(Local)] (len(Local) a multiple of the MTU, so no packet
// straddles its end). A message of any length then costs len(Local) octets of memory.
type SendWR struct {
	ID         uint64
	Op         Op
	Local      []byte
	Length     int    // WRITE: the message's length when it repeats Local; 0 means len(Local)
	RemoteAddr uint64 // WRITE, READ, atomics
	RKey       uint32
	Imm        uint32 // SEND_WITH_IMM, WRITE_WITH_IMM
	Compare    uint64 // COMPARE_SWAP
	SwapAdd    uint64 // swap value (COMPARE_SWAP) or addend (FETCH_ADD)
}

// RecvWR is a receive work request: a buffer for one incoming SEND (or the completion of one
// WRITE with immediate).
type RecvWR struct {
	ID  uint64
	Buf []byte
}

// Status is the outcome of a work request.
type Status uint8

// The completion statuses.
const (
	StatusSuccess              Status = iota
	StatusRemoteAccessError           // the responder NAKed with remote access error (0x62)
	StatusRemoteInvalidRequest        // the responder NAKed with invalid request (0x61)
	StatusRemoteOperationError        // the responder NAKed with remote operational error
	StatusRetryExceeded               // timeouts without progress beyond the retry count
	StatusRNRRetryExceeded            // RNR NAKs beyond the RNR retry count
	StatusLocalLengthError            // an incoming SEND did not fit the receive buffer
	StatusFlushed                     // the QP entered the error state before it ran
)

func (s Status) String() string {
	return [...]string{"success", "remote access error", "remote invalid request",
		"remote operational error", "retry exceeded", "RNR retry exceeded", "local length error",
		"flushed"}[min(s, StatusFlushed)]
}

// Kind says what a completion reports.
type Kind uint8

// The completion kinds.
const (
	KindSend         Kind = iota // a send work request finished (any Op)
	KindRecv                     // an incoming SEND filled a receive buffer
	KindRecvWriteImm             // an incoming WRITE with immediate consumed a receive request
	KindWritePlaced              // an incoming RDMA WRITE was placed (Config.NotifyWrites)
)

// Completion is the outcome of a work request.
type Completion struct {
	ID     uint64
	Kind   Kind
	Op     Op // KindSend: the request's operation
	Status Status
	Len    int    // octets received (KindRecv), moved (KindSend), or written (KindWritePlaced)
	Imm    uint32 // with HasImm
	HasImm bool
	Addr   uint64 // KindWritePlaced: the message's first address
	// Orig is the remote value before an atomic (also written to Local[0:8]).
	Orig uint64
}

// size returns the message's length: Length when it repeats Local, else len(Local).
func (wr *SendWR) size() int { return max(wr.Length, len(wr.Local)) }

// segment returns octets lo..hi-1 of the message (within one period of a repeated Local).
func (wr *SendWR) segment(lo, hi int) []byte {
	if wr.Length > len(wr.Local) {
		o := lo % len(wr.Local)
		return wr.Local[o : o+hi-lo]
	}
	return wr.Local[lo:hi]
}
