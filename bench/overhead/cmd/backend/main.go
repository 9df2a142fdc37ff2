// Command backend is the trivial fast upstream of the overhead benchmark
// (bench/overhead): an HTTP server on one or more loopback ports that reads
// each request body whole, as an inference engine does, and answers a
// small fixed chat completion. It does no work per byte, so that the
// proxy in front of it is what the benchmark measures.
//
//	backend -listen 127.0.0.1:9001,127.0.0.1:9002
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

func handle(w http.ResponseWriter, r *http.Request) {
	if _, err := io.Copy(io.Discard, r.Body); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "application/json")
	h.Set("Content-Length", strconv.Itoa(len(reply)))
	io.WriteString(w, reply)
}

func main() {
	listen := flag.String("listen", "127.0.0.1:9001", "comma-separated addresses to serve on")
	flag.Parse()
	addrs := strings.Split(*listen, ",")
	errs := make(chan error, len(addrs))
	for _, a := range addrs {
		srv := &http.Server{Addr: a, Handler: http.HandlerFunc(handle)}
		go func() { errs <- srv.ListenAndServe() }()
	}
	log.Fatal(<-errs)
}
