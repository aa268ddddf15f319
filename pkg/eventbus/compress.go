package eventbus

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/nats-io/nats.go"
)

// Large records and replies travel gzip-compressed, so a fleet's
// composition, plan and state fit in one NATS message (MaxMessageBytes):
// the JSON of a fanned-out formula repeats itself and shrinks about 14
// times. Small ones stay plain JSON, readable with the nats CLI as they
// are.

// CompressAbove is the size from which a record or reply is compressed.
const CompressAbove = 64 << 10

// MaxUnpackedBytes bounds what a compressed record or reply may expand to.
const MaxUnpackedBytes = 64 << 20

// EncodingHeader and EncodingGzip mark a compressed reply (a record in a
// KV bucket is told by its first bytes: JSON never starts with gzip's).
const (
	EncodingHeader = "Content-Encoding"
	EncodingGzip   = "gzip"
)

// ErrTooLarge is wrapped by Pack when even the compressed data does not
// fit in one message.
var ErrTooLarge = errors.New("too large for one message")

var gzipMagic = []byte{0x1f, 0x8b}

// Pack returns data as it is when it is small, else gzip-compressed (and
// true). The result is at most MaxMessageBytes, or an ErrTooLarge that
// says both sizes.
func Pack(data []byte) ([]byte, bool, error) {
	if len(data) <= CompressAbove {
		return data, false, nil
	}
	// Fast first; the best compression only when the fast one is not enough.
	var packed []byte
	for _, level := range []int{gzip.BestSpeed, gzip.BestCompression} {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, level)
		if _, err := zw.Write(data); err != nil {
			return nil, false, err
		}
		if err := zw.Close(); err != nil {
			return nil, false, err
		}
		if packed = buf.Bytes(); len(packed) <= MaxMessageBytes {
			return packed, true, nil
		}
	}
	return nil, false, fmt.Errorf("%w: %d bytes, %d compressed, more than the %d a message may hold", ErrTooLarge, len(data), len(packed), MaxMessageBytes)
}

// IsPacked says whether data is compressed by Pack (a KV record).
func IsPacked(data []byte) bool { return bytes.HasPrefix(data, gzipMagic) }

// MaxQueryBytes bounds what the body of a query (state.*) may expand to:
// a query is a few bytes, and whoever may read may send one, so a small
// compressed body must not make the service inflate MaxUnpackedBytes.
const MaxQueryBytes = 64 << 10

// Unpack returns what Pack was given: data itself unless it is compressed.
func Unpack(data []byte) ([]byte, error) { return unpack(data, MaxUnpackedBytes) }

func unpack(data []byte, limit int) ([]byte, error) {
	if !IsPacked(data) {
		return data, nil
	}
	zr, err := gzip.NewReader(bytes.NewReader(data))
	if err != nil {
		return nil, fmt.Errorf("compressed data: %w", err)
	}
	out, err := io.ReadAll(io.LimitReader(zr, int64(limit)+1))
	if err != nil {
		return nil, fmt.Errorf("compressed data: %w", err)
	}
	if len(out) > limit {
		return nil, fmt.Errorf("compressed data expands past %d bytes", limit)
	}
	return out, nil
}

// EncodeBody is the JSON of a request or reply body, compressed when large:
// then packed is true and the message carries EncodingHeader:
// EncodingGzip.
func EncodeBody(v any) (data []byte, packed bool, err error) {
	data, err = json.Marshal(v)
	if err != nil {
		return nil, false, err
	}
	return Pack(data)
}

// BodyOf is a message's body as it was before EncodeBody compressed it.
// A body marked compressed that is not is an error.
func BodyOf(msg *nats.Msg) ([]byte, error) { return BodyAtMost(msg, MaxUnpackedBytes) }

// BodyAtMost is BodyOf for a body that may expand to limit bytes at most
// (MaxQueryBytes for a query).
func BodyAtMost(msg *nats.Msg, limit int) ([]byte, error) {
	if msg.Header.Get(EncodingHeader) != EncodingGzip {
		return msg.Data, nil
	}
	if !IsPacked(msg.Data) {
		return nil, fmt.Errorf("body marked %s %s is not", EncodingHeader, EncodingGzip)
	}
	return unpack(msg.Data, limit)
}
