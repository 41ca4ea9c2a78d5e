package mpread

import (
	"errors"
	"strconv"
)

// ErrInvalid is wrapped by every error a Reader returns: the input is not msgpack, is
// truncated, holds a value of another type than the one asked for, or exceeds a limit.
var ErrInvalid = errors.New("invalid msgpack input")

// Error is a decoding failure at one place in the input.
type Error struct {
	Offset int    // byte offset in the input of the value that could not be read
	Msg    string // what was wrong, e.g. "want a string, got an integer"
}

func (e *Error) Error() string { return "msgpack at byte " + strconv.Itoa(e.Offset) + ": " + e.Msg }

// Unwrap returns ErrInvalid.
func (e *Error) Unwrap() error { return ErrInvalid }
