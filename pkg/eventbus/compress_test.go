package eventbus_test

import (
	"bytes"
	"compress/gzip"
	"errors"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"

	"github.com/gantry-dev/gantry/pkg/eventbus"
)

func TestPackLargeOnly(t *testing.T) {
	t.Parallel()
	small := []byte(`{"a":1}`)
	got, packed, err := eventbus.Pack(small)
	if err != nil || packed || !bytes.Equal(got, small) {
		t.Fatalf("small: %q %v %v", got, packed, err)
	}
	// A fleet's record: one entry per host, much alike.
	var b strings.Builder
	b.WriteString(`{"formulas":[`)
	for i := range 20000 {
		b.WriteString(`{"id":"app-web-` + strings.Repeat("x", i%7) + `","server":"web","nodes":[{"name":"conf","run":"echo conf"}]},`)
	}
	b.WriteString(`{}]}`)
	large := []byte(b.String())
	if len(large) <= eventbus.MaxMessageBytes {
		t.Fatalf("test data %d bytes: not larger than a message", len(large))
	}
	got, packed, err = eventbus.Pack(large)
	if err != nil || !packed || len(got) > eventbus.MaxMessageBytes || !eventbus.IsPacked(got) {
		t.Fatalf("large: %d bytes, packed %v, %v", len(got), packed, err)
	}
	back, err := eventbus.Unpack(got)
	if err != nil || !bytes.Equal(back, large) {
		t.Fatalf("round trip: %d bytes, %v", len(back), err)
	}
	plain, err := eventbus.Unpack(small)
	if err != nil || !bytes.Equal(plain, small) {
		t.Fatalf("unpack of plain JSON: %q %v", plain, err)
	}
}

func TestPackTooLarge(t *testing.T) {
	t.Parallel()
	// Random-looking bytes do not compress.
	data := make([]byte, 3*eventbus.MaxMessageBytes/2)
	x := uint32(1)
	for i := range data {
		x = x*1664525 + 1013904223
		data[i] = byte(x >> 24)
	}
	_, _, err := eventbus.Pack(data)
	if !errors.Is(err, eventbus.ErrTooLarge) || !strings.Contains(err.Error(), "1572864 bytes") {
		t.Fatalf("err %v", err)
	}
}

func TestUnpackBounded(t *testing.T) {
	t.Parallel()
	var bomb bytes.Buffer
	zw := gzip.NewWriter(&bomb)
	zero := make([]byte, 1<<20)
	for range eventbus.MaxUnpackedBytes>>20 + 1 {
		_, _ = zw.Write(zero)
	}
	_ = zw.Close()
	if _, err := eventbus.Unpack(bomb.Bytes()); err == nil || !strings.Contains(err.Error(), "expands past") {
		t.Fatalf("bomb of %d bytes: %v", bomb.Len(), err)
	}
	if _, err := eventbus.Unpack([]byte{0x1f, 0x8b, 1, 2}); err == nil {
		t.Fatal("a damaged body unpacked")
	}
}

func TestBodyOf(t *testing.T) {
	t.Parallel()
	v := map[string]string{"k": strings.Repeat("fleet ", 20000)}
	data, packed, err := eventbus.EncodeBody(v)
	if err != nil || !packed {
		t.Fatalf("encode: packed %v, %v", packed, err)
	}
	msg := &nats.Msg{Data: data, Header: nats.Header{eventbus.EncodingHeader: {eventbus.EncodingGzip}}}
	body, err := eventbus.BodyOf(msg)
	if err != nil || !strings.Contains(string(body), `"k":"fleet fleet`) {
		t.Fatalf("body: %d bytes, %v", len(body), err)
	}
	if _, err := eventbus.BodyOf(&nats.Msg{Data: []byte(`{}`), Header: msg.Header}); err == nil {
		t.Fatal("a plain body marked compressed was taken")
	}
	if body, err := eventbus.BodyOf(&nats.Msg{Data: []byte(`{}`)}); err != nil || string(body) != `{}` {
		t.Fatalf("plain: %q %v", body, err)
	}
}

func TestBodyAtMost(t *testing.T) {
	packed, ok, err := eventbus.Pack(bytes.Repeat([]byte(" "), 200<<10))
	if err != nil || !ok {
		t.Fatalf("pack: %v %v", ok, err)
	}
	msg := &nats.Msg{Data: packed, Header: nats.Header{eventbus.EncodingHeader: {eventbus.EncodingGzip}}}
	if _, err := eventbus.BodyAtMost(msg, eventbus.MaxQueryBytes); err == nil || !strings.Contains(err.Error(), "expands past") {
		t.Errorf("200 KiB as a query: %v", err)
	}
	if b, err := eventbus.BodyOf(msg); err != nil || len(b) != 200<<10 {
		t.Errorf("200 KiB as a body: %d %v", len(b), err)
	}
}
