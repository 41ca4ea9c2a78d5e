package paged

import (
	"bytes"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"bitgo/quantcfg"
)

// model2B lists the linear layers of a BitNet b1.58 2B4T-shaped model (30 blocks, hidden
// 2560, FFN 6912, 640-wide k/v): 2.08e9 weights, 0.52 GB as 2-bit i2s.
func model2B() []quantcfg.LayerSpec {
	var out []quantcfg.LayerSpec
	for i := range 30 {
		p := "model.layers." + strconv.Itoa(i) + "."
		for _, l := range []struct {
			name    string
			out, in int
		}{
			{"self_attn.q_proj", 2560, 2560}, {"self_attn.k_proj", 640, 2560}, {"self_attn.v_proj", 640, 2560},
			{"self_attn.o_proj", 2560, 2560}, {"mlp.gate_proj", 6912, 2560}, {"mlp.up_proj", 6912, 2560},
			{"mlp.down_proj", 2560, 6912},
		} {
			out = append(out, quantcfg.LayerSpec{Name: p + l.name, Format: quantcfg.I2S, Out: l.out, In: l.in}.WithDefaults())
		}
	}
	return out
}

// write2B writes the synthetic 2B pack (blob bytes are a repeating pattern) and returns
// its path and the number of blob bytes.
func write2B(tb testing.TB, dir string, sync bool) (string, int64) {
	path := filepath.Join(dir, "model2b.bitgo")
	w, err := CreatePack(path, PackOptions{Model: "synthetic-2b", Layout: "bench", NoSync: !sync})
	if err != nil {
		tb.Fatal(err)
	}
	pattern := bytes.Repeat([]byte{0x1b, 0x6c, 0xb1, 0xc6}, 1<<18) // 1 MiB
	var total int64
	for _, s := range model2B() {
		bw, err := w.BeginLayer(PackLayer{Spec: s, Scales: []float32{0.0123}})
		if err != nil {
			tb.Fatal(err)
		}
		n := s.Out * s.In / 4
		for n > 0 {
			k := min(n, len(pattern))
			if _, err := bw.Write(pattern[:k]); err != nil {
				tb.Fatal(err)
			}
			n -= k
		}
		if err := bw.Close(); err != nil {
			tb.Fatal(err)
		}
	}
	for _, s := range model2B() {
		total += int64(s.Out * s.In / 4)
	}
	if err := w.Close(); err != nil {
		tb.Fatal(err)
	}
	return path, total
}

// BenchmarkPackWrite2B measures the writer alone (blobs already packed, in memory), with
// the final fsync: the upper bound for `bitd pack`'s output side.
func BenchmarkPackWrite2B(b *testing.B) {
	dir := b.TempDir()
	var total int64
	for _, s := range model2B() {
		total += int64(s.Out * s.In / 4)
	}
	b.SetBytes(total)
	for b.Loop() {
		write2B(b, dir, true)
	}
}

// BenchmarkPackOpen2B measures load-to-ready of the synthetic 2B pack with a warm page
// cache, for each verification mode, and reports the process's resident memory growth
// after opening, relative to the file size (rss/pack).
func BenchmarkPackOpen2B(b *testing.B) {
	dir := b.TempDir()
	path, _ := write2B(b, dir, false)
	st, _ := os.Stat(path)
	if _, err := os.ReadFile(path); err != nil { // warm the page cache
		b.Fatal(err)
	}
	for _, c := range []struct {
		name string
		opts OpenOptions
	}{
		{"verify=open", OpenOptions{Verify: VerifyOnOpen}},
		{"verify=open/populate", OpenOptions{Verify: VerifyOnOpen, Populate: true}},
		{"verify=never", OpenOptions{Verify: VerifyNever}},
		{"verify=never/populate", OpenOptions{Verify: VerifyNever, Populate: true}},
	} {
		b.Run(c.name, func(b *testing.B) {
			b.SetBytes(st.Size())
			var rss float64
			for b.Loop() {
				before := ProcessRSS()
				p, err := OpenPack(path, c.opts)
				if err != nil {
					b.Fatal(err)
				}
				rss = float64(ProcessRSS()-before) / float64(st.Size())
				p.Close()
			}
			b.ReportMetric(rss, "rss/pack")
		})
	}
}

// BenchmarkCRC32C is the checksum alone (hash/crc32's SSE4.2 Castagnoli), on 64 MiB.
func BenchmarkCRC32C(b *testing.B) {
	buf := bytes.Repeat([]byte{1, 2, 3, 4, 5, 6, 7, 8}, 8<<20)
	b.SetBytes(int64(len(buf)))
	for b.Loop() {
		CRC32C(buf)
	}
}
