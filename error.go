package seckill

import (
	"errors"
	"fmt"
)

// Error codes. They travel unchanged to API clients (see httpapi).
const (
	EINVALID      = "invalid_argument"
	EUNAUTHORIZED = "unauthorized"
	ENOTFOUND     = "not_found"
	ESOLDOUT      = "sold_out"
	ENOTSTARTED   = "not_started"
	EENDED        = "ended"
	EUNAVAILABLE  = "unavailable" // the request surely did not happen: Redis or the database refused or could not be reached
	EINTERNAL     = "internal"

	// EOUTCOMEUNKNOWN: the request was sent and may have happened (no
	// reply in time, or the replicas did not confirm it): the client must
	// ask again to learn which (for a grab, the next grab tells).
	EOUTCOMEUNKNOWN = "outcome_unknown"

	// The order state machine refuses a transition (HTTP 409).
	EORDEREXPIRED   = "order_expired"         // pay or cancel of an expired order, or pay past the deadline
	EORDERCANCELLED = "order_cancelled"       // pay of a cancelled order
	EORDERPAID      = "order_paid"            // cancel of a paid order, or pay under another idempotency key
	ENOTPAYABLE     = "order_not_payable"     // pay of a pending or failed order, or in a sale without payment
	ENOTCANCELLABLE = "order_not_cancellable" // cancel of a pending or failed order

	// EKEYREUSED: a pay under the idempotency key of an earlier one (or,
	// without a key, of the order's keyless payment) with another
	// payment_ref: a key names one call, with its parameters (HTTP 422).
	EKEYREUSED = "idempotency_key_reused"
)

// ErrFenced is returned by a write that carries a fencing token lower than
// one the database has seen: the writer lost its lock.
var ErrFenced = errors.New("seckill: write refused: a newer fencing token was seen")

// Error is an error meant for the caller: a code from the list above and a
// human-readable message. Any other error is internal.
type Error struct {
	Code    string
	Message string
}

func (e *Error) Error() string { return "seckill: " + e.Code + ": " + e.Message }

// Errorf returns an *Error with the code and a formatted message.
func Errorf(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// ErrorCode returns the code of the *Error in err's chain, EINTERNAL for any
// other error, and "" for nil.
func ErrorCode(err error) string {
	if err == nil {
		return ""
	}
	if e := asError(err); e != nil {
		return e.Code
	}
	return EINTERNAL
}

// ErrorMessage returns the message of the *Error in err's chain, or a generic
// message that reveals nothing of an internal error.
func ErrorMessage(err error) string {
	if e := asError(err); e != nil {
		return e.Message
	}
	return "internal error"
}

// asError returns the *Error in err's chain, or nil. An *Error itself, the
// common case (every answer after a sell-out is one), is found without
// errors.As, which costs more than the rest of writing the answer.
func asError(err error) *Error {
	if e, ok := err.(*Error); ok {
		return e
	}
	if e, ok := errors.AsType[*Error](err); ok {
		return e
	}
	return nil
}
