// Package wire encodes and decodes the nine CREM messages (REPAIR, HELLO, HELLO_ACK,
// PARAM_UPDATE, PARAM_ACK, REPAIR_REQUEST, LOSS_REPORT, PATH_REPORT, CLOSE) exactly as the CREM
// draft lays them out, with the bodies the rulings fill in (CLOSE per C2, hop entries per C10).
//
// Each message is a struct with Append, which validates the fields and appends the whole message,
// common header included, and a Parse function that reads one datagram. The engines call these on
// every packet, so parsing never panics, whatever the input, and REPAIR is encoded and decoded
// without allocating: a parsed symbol aliases the datagram.
//
// Errors come in two kinds. A message with an unknown Version or Type must be discarded silently
// (draft, common header); such errors match ErrDiscard with errors.Is. Every other malformed
// message yields a *FieldError that names the message and the field at fault, so the engine can
// count it and the operator can read what was wrong.
//
// Every parser takes the whole UDP payload: CREM carries one message per datagram, and the
// Length field must equal the datagram's size. On error a per-type parser returns what it had
// read (the Flow ID, for a counter), and Parse returns a nil Message.
//
// Reserved fields and undefined flag bits are written as zero and ignored on parse. Registry
// values that the draft and rulings do not assign, and those of the private-use quarter, are
// parsed as they are; acting on them is the engines' business.
//
// The package holds no state and knows nothing of time or sockets.
package wire
