package ipc

import (
	"encoding/binary"

	"bitgo/internal/mpread"
)

// msgpack on the wire. Untrusted msgpack (requests and handshakes on the daemon's side,
// replies on the client's) is read with internal/mpread under the wire's limits; trusted
// values are encoded with vmihailenco/msgpack, except the fixed-width encodings of the
// hot path, appended here.

// wireLimits: values nest at most 8 deep, map keys are at most maxKeyLen bytes.
var wireLimits = mpread.Limits{Depth: 8, KeyLen: maxKeyLen}

func newReader(b []byte) *mpread.Reader { return mpread.New(b, wireLimits) }

// Append helpers for the fixed-width encodings of the hot path.

func appendU64(b []byte, v uint64) []byte {
	b = append(b, 0xcf)
	return binary.BigEndian.AppendUint64(b, v)
}

func appendU32(b []byte, v uint32) []byte {
	b = append(b, 0xce)
	return binary.BigEndian.AppendUint32(b, v)
}

func appendStr(b []byte, s string) []byte {
	switch n := len(s); {
	case n < 32:
		b = append(b, 0xa0|byte(n))
	case n < 256:
		b = append(b, 0xd9, byte(n))
	case n < 1<<16:
		b = append(b, 0xda)
		b = binary.BigEndian.AppendUint16(b, uint16(n))
	default:
		b = append(b, 0xdb)
		b = binary.BigEndian.AppendUint32(b, uint32(n))
	}
	return append(b, s...)
}

// fields decodes a map with string keys, handing each known key's value to its
// function and skipping unknown keys (a newer daemon may send more).
func fields(r *mpread.Reader, known map[string]func(*mpread.Reader) error) error {
	return r.Fields("", nil, func(k string) (bool, error) {
		fn, ok := known[k]
		if !ok {
			return false, nil
		}
		return true, fn(r)
	})
}

type integer interface {
	~int | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// intField stores an integer that must fit T.
func intField[T integer](p *T) func(*mpread.Reader) error {
	return func(r *mpread.Reader) error {
		v, err := r.Int()
		if err != nil {
			return err
		}
		if T(v) < 0 != (v < 0) || int64(T(v)) != v {
			return r.Errorf("integer %d does not fit the field", v)
		}
		*p = T(v)
		return nil
	}
}

func uint64Field(p *uint64) func(*mpread.Reader) error {
	return func(r *mpread.Reader) error {
		v, err := r.Uint()
		*p = v
		return err
	}
}

func strField(p *string, max int) func(*mpread.Reader) error {
	return func(r *mpread.Reader) error {
		s, err := r.Str(max)
		*p = s
		return err
	}
}

func boolField(p *bool) func(*mpread.Reader) error {
	return func(r *mpread.Reader) error {
		v, err := r.Bool()
		*p = v
		return err
	}
}
