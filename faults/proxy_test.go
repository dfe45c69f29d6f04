package faults_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// proxy is a TCP proxy in this process (Shopify's toxiproxy as a library)
// between the service's processes and a server: the test slows the link
// or cuts it.
type proxy struct {
	t *testing.T
	p *toxiproxy.Proxy
}

var toxiServer = toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())

// startProxy listens on a free loopback port and forwards to upstream
// (host:port) until the test ends.
func startProxy(t *testing.T, name, upstream string) *proxy {
	t.Helper()
	p := toxiproxy.NewProxy(toxiServer, name, "127.0.0.1:0", upstream)
	if err := p.Start(); err != nil {
		t.Fatalf("start proxy %s: %v", name, err)
	}
	t.Cleanup(p.Stop)
	return &proxy{t: t, p: p}
}

// Addr is the address to connect to instead of upstream.
func (p *proxy) Addr() string { return p.p.Listen }

// Cut closes the listener and every connection: the server is unreachable
// (connections refused) until Restore.
func (p *proxy) Cut() { p.p.Stop() }

// Restore listens again on the same address.
func (p *proxy) Restore() {
	p.t.Helper()
	if err := p.p.Start(); err != nil {
		p.t.Fatalf("restart proxy %s: %v", p.p.Name, err)
	}
}

// Slow delays every reply by latency, until Fast.
func (p *proxy) Slow(latency time.Duration) {
	p.t.Helper()
	toxic := fmt.Sprintf(`{"name":"slow","type":"latency","stream":"downstream","attributes":{"latency":%d}}`, latency.Milliseconds())
	if _, err := p.p.Toxics.AddToxicJson(strings.NewReader(toxic)); err != nil {
		p.t.Fatalf("slow proxy %s: %v", p.p.Name, err)
	}
}

// Fast removes the delay.
func (p *proxy) Fast() {
	p.t.Helper()
	if err := p.p.Toxics.RemoveToxic(context.Background(), "slow"); err != nil {
		p.t.Fatalf("remove latency of proxy %s: %v", p.p.Name, err)
	}
}
