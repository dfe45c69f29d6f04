// Command baseline is the yardstick of the grab benchmarks: the cheapest
// possible Go HTTP handler, GET /hello answering "ok" from a server with no
// settings. perf/wrk-grab.sh measures the grab path as a ratio to it, in the
// same run, on the same machine, so the figure carries over between machines
// where a request rate does not.
//
// It imports only the standard library and lives in the main module, so
// go vet ./... and go test ./... cover it and it needs no go.mod of its own.
package main

import (
	"flag"
	"log"
	"net/http"
)

func main() {
	listen := flag.String("listen", "127.0.0.1:8090", "address to listen on")
	flag.Parse()
	http.HandleFunc("/hello", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok")) })
	log.Fatal(http.ListenAndServe(*listen, nil))
}
