package redis

import (
	"fmt"
	"runtime"
	"sync/atomic"
	"testing"
	"time"
)

// Hashes per message for 2 KB, 32 KB and 256 KB prompts at 256-byte
// chunks; the messages are 113, 1073 and 8241 bytes.
var benchSizes = []int{8, 128, 1024}

// BenchmarkPublish is the cost on the policy's goroutine: a copy into the
// queue, or a counted drop when the publisher has not drained it yet. The
// accepted/op metric says which of the two it mostly measured.
func BenchmarkPublish(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("hashes=%d", n), func(b *testing.B) {
			s := startRedis(b)
			tr := newTransport(b, "", s.url())
			waitConnected(b, tr, true, reconnectWithin)
			msg := placement(0, n)
			for range 2 * DefaultBuffer { // grow the queue's slots
				tr.Publish(msg)
			}
			accepted := 0
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			for range b.N {
				if tr.Publish(msg) {
					accepted++
				}
			}
			b.ReportMetric(float64(accepted)/float64(b.N), "accepted/op")
			b.ReportMetric(float64(len(msg)), "B/msg")
		})
	}
}

// BenchmarkPublishAccepted is Publish's other path, a copy into the
// queue, with the benchmark itself taking each message off the queue as
// the publisher would (no Redis involved).
func BenchmarkPublishAccepted(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("hashes=%d", n), func(b *testing.B) {
			c := &conn{queue: make(chan []byte, 1), free: make(chan []byte, 1)}
			c.free <- nil
			c.up.Store(true)
			msg := placement(0, n)
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			for b.Loop() {
				if !c.publish(msg) {
					b.Fatal("dropped")
				}
				c.free <- <-c.queue
			}
		})
	}
}

// BenchmarkPublishParallel is Publish from every CPU at once, as
// concurrent requests do.
func BenchmarkPublishParallel(b *testing.B) {
	s := startRedis(b)
	tr := newTransport(b, "", s.url())
	waitConnected(b, tr, true, reconnectWithin)
	msg := placement(0, 128)
	b.ReportAllocs()
	b.SetBytes(int64(len(msg)))
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tr.Publish(msg)
		}
	})
}

// BenchmarkThroughput is end to end through a real redis-server: edge a
// publishes b.N messages, edge b receives them all. It keeps at most half
// a buffer in flight, so nothing is dropped and the figure is what the
// pipeline sustains, in messages/s and bytes/s.
func BenchmarkThroughput(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("hashes=%d", n), func(b *testing.B) {
			s := startRedis(b)
			pub := newTransport(b, "a", s.url())
			sub := newTransport(b, "b", s.url())
			var got atomic.Int64
			progress := make(chan struct{}, 1)
			cancel := sub.Subscribe(func([]byte) {
				got.Add(1)
				select {
				case progress <- struct{}{}:
				default:
				}
			})
			defer cancel()
			waitConnected(b, pub, true, reconnectWithin)
			waitConnected(b, sub, true, reconnectWithin)
			msg := placement(0, n)
			const window = DefaultBuffer / 2
			b.ReportAllocs()
			b.SetBytes(int64(len(msg)))
			b.ResetTimer()
			start := time.Now()
			deadline := time.NewTimer(time.Minute)
			defer deadline.Stop()
			for i := range int64(b.N) {
				for i-got.Load() >= window {
					select {
					case <-progress:
					case <-deadline.C:
						b.Fatalf("stalled: %d of %d received (%+v)", got.Load(), b.N, pub.Status())
					}
				}
				for !pub.Publish(msg) {
					runtime.Gosched()
				}
			}
			for got.Load() < int64(b.N) {
				select {
				case <-progress:
				case <-deadline.C:
					b.Fatalf("stalled: %d of %d received (%+v)", got.Load(), b.N, pub.Status())
				}
			}
			b.ReportMetric(float64(b.N)/time.Since(start).Seconds(), "msgs/s")
			b.ReportMetric(float64(len(msg)), "B/msg")
		})
	}
}
