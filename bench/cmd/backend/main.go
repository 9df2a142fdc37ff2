// Command backend is the trivial fast upstream of the overhead benchmark
// (bench/overhead): an HTTP server on one or more loopback ports that reads
// each request body whole, as an inference engine does, and answers a
// small fixed chat completion. It does no work per byte, so that the
// proxy in front of it is what the benchmark measures. With -stream N it
// streams the answer instead, as an engine does: N SSE chunks of one
// token each, each flushed, then the usage chunk and [DONE].
//
//	backend -listen 127.0.0.1:9001,127.0.0.1:9002 [-stream 200]
package main

import (
	"flag"
	"io"
	"log"
	"net/http"
	"strconv"
	"strings"
)

const reply = `{"id":"chatcmpl-overhead","object":"chat.completion","model":"meta-llama/Llama-3.1-8B-Instruct",` +
	`"choices":[{"index":0,"message":{"role":"assistant","content":"OK."},"finish_reason":"stop"}],` +
	`"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`

const (
	chunk      = `data: {"id":"chatcmpl-overhead","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[{"index":0,"delta":{"content":" ok"},"finish_reason":null}]}` + "\n\n"
	usageChunk = `data: {"id":"chatcmpl-overhead","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[],"usage":{"prompt_tokens":2048,"completion_tokens":1,"total_tokens":2049,"prompt_tokens_details":{"cached_tokens":1024}}}` + "\n\n" +
		"data: [DONE]\n\n"
)

// streamChunks is -stream: 0 answers JSON.
var streamChunks int

func handle(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if streamChunks > 0 {
		w.Header().Set("Content-Type", "text/event-stream")
		f, _ := w.(http.Flusher)
		for range streamChunks {
			io.WriteString(w, chunk)
			if f != nil {
				f.Flush()
			}
		}
		io.WriteString(w, usageChunk)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(reply)))
	io.WriteString(w, reply)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "comma-separated addresses to serve on")
	flag.IntVar(&streamChunks, "stream", 0, "stream each answer as this many SSE chunks, each flushed, then a usage chunk (0: one JSON answer)")
	flag.Parse()
	addrs := strings.Split(*listen, ",")
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		srv := &http.Server{Addr: a, Handler: http.HandlerFunc(handle)}
		go func() { errs <- srv.ListenAndServe() }()
	}
	log.Fatal(<-errs)
}
