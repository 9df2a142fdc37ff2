package edgesync

import (
	"fmt"
	"testing"
)

// Hashes per message for 2 KB, 32 KB and 256 KB prompts (of routing text)
// at 256-byte chunks, to a Dial of 14 bytes.
var benchSizes = []int{8, 128, 1024}

func BenchmarkAppendBinary(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("hashes=%d", n), func(b *testing.B) {
			m := sized(n)
			buf := m.AppendBinary(nil)
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				buf = m.AppendBinary(buf[:0])
			}
			// A message's size on the wire; a routed request publishes two
			// (placed and confirmed), each with every hash by default.
			b.ReportMetric(float64(len(buf)), "B/msg")
		})
	}
}

func BenchmarkDecode(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("hashes=%d", n), func(b *testing.B) {
			buf := sized(n).AppendBinary(nil)
			var m Message
			b.ReportAllocs()
			b.SetBytes(int64(len(buf)))
			for b.Loop() {
				if err := m.Decode(buf, Limits{}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
