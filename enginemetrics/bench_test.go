package enginemetrics

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

// vllmScrape is an exposition the size of a real vLLM V1 engine's: the
// families Parse reads, and the histograms and counters it skips (vLLM
// publishes about twenty histograms of 10 to 40 buckets per model, and
// the Python process's own metrics).
func vllmScrape() []byte {
	var b bytes.Buffer
	b.WriteString(vllmV1)
	for h := range 20 {
		fmt.Fprintf(&b, "# HELP vllm:histogram_%d A histogram vLLM publishes.\n# TYPE vllm:histogram_%d histogram\n", h, h)
		for i := range 30 {
			fmt.Fprintf(&b, "vllm:histogram_%d_bucket{engine=\"0\",le=\"%d.0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} %d.0\n", h, i, i*7)
		}
		fmt.Fprintf(&b, "vllm:histogram_%d_count{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 210.0\n", h)
		fmt.Fprintf(&b, "vllm:histogram_%d_sum{engine=\"0\",model_name=\"meta-llama/Llama-3.1-8B-Instruct\"} 1234.5\n", h)
	}
	for i := range 40 {
		fmt.Fprintf(&b, "# HELP python_gc_objects_collected_total_%d Objects collected during gc\n# TYPE python_gc_objects_collected_total_%d counter\npython_gc_objects_collected_total_%d{generation=\"0\"} 1234.0\n", i, i, i)
	}
	return b.Bytes()
}

// hostileScrape is a body just under the size bound the policy reads
// (4 MiB) of well-formed lines of a family Parse reads.
func hostileScrape() []byte {
	line := "vllm:num_requests_waiting{model_name=\"" + strings.Repeat("m", 1000) + "\"} 1\n"
	return bytes.Repeat([]byte(line), (4<<20)/len(line))
}

func BenchmarkParse(b *testing.B) {
	header := http.Header{"Content-Type": {"text/plain; version=0.0.4; charset=utf-8"}}
	for _, bc := range []struct {
		name string
		body []byte
	}{{"vllm", vllmScrape()}, {"hostile-4MiB", hostileScrape()}} {
		b.Run(bc.name, func(b *testing.B) {
			b.SetBytes(int64(len(bc.body)))
			b.ReportAllocs()
			for b.Loop() {
				if _, err := Parse(bytes.NewReader(bc.body), header); err != nil && !errors.Is(err, ErrTooMuch) {
					b.Fatal(err)
				}
			}
		})
	}
}
