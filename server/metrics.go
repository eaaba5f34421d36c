package server

import (
	"context"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sandboxkit/sandboxkit/backend"
)

// The server's Prometheus metrics, served at GET /metrics (admin key).
// Each Server has a registry of its own (several may run in one process).

// Buckets of the latency histograms, in seconds: from a pooled claim or an
// exec through sbxd (milliseconds) to a cold create that builds an image
// (minutes).
var latencyBuckets = []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}

type metrics struct {
	reg *prometheus.Registry

	creates     *prometheus.CounterVec
	createTime  *prometheus.HistogramVec
	removals    *prometheus.CounterVec
	toolCalls   *prometheus.CounterVec
	toolTime    *prometheus.HistogramVec
	execTime    *prometheus.HistogramVec
	requests    *prometheus.CounterVec
	requestTime *prometheus.HistogramVec
	terminals   *prometheus.CounterVec
	denials     prometheus.Counter

	// seenDenial is the time of the latest egress denial counted, by
	// sandbox (guarded by mu).
	mu         sync.Mutex
	seenDenial map[string]time.Time
}

func newMetrics(s *Server) *metrics {
	m := &metrics{reg: prometheus.NewRegistry(), seenDenial: map[string]time.Time{}}
	f := func(c prometheus.Collector) { m.reg.MustRegister(c) }
	m.creates = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxkit_sandbox_creates_total",
		Help: "Sandboxes asked for, by type, source (pool: claimed from a warm pool; cold: made for the call) and outcome (ok, error).",
	}, []string{"type", "source", "outcome"})
	m.createTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandboxkit_sandbox_create_seconds",
		Help:    "Time to first command: from a create call until its sandbox takes commands, by type and source (pool, cold).",
		Buckets: latencyBuckets,
	}, []string{"type", "source"})
	m.removals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxkit_sandbox_removals_total",
		Help: "Sandboxes the server removed, by reason (deleted: a call asked; idle: no calls for its idle TTL; lifetime: its hard limit; shutdown).",
	}, []string{"reason"})
	m.toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxkit_tool_calls_total",
		Help: "Tool calls over MCP and HTTP, by tool and outcome (ok, error: the agent was told the call failed).",
	}, []string{"tool", "outcome"})
	m.toolTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandboxkit_tool_call_seconds",
		Help:    "Duration of tool calls over MCP and HTTP, by tool.",
		Buckets: latencyBuckets,
	}, []string{"tool"})
	m.execTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandboxkit_exec_seconds",
		Help:    "Duration of commands run to their end in a call (the execute tool; the OpenSandbox API's POST /command), by api (tool, opensandbox).",
		Buckets: latencyBuckets,
	}, []string{"api"})
	m.requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxkit_http_requests_total",
		Help: "HTTP requests, by route (the pattern matched; \"unmatched\" for none) and status code.",
	}, []string{"route", "code"})
	m.requestTime = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "sandboxkit_http_request_seconds",
		Help:    "Duration of HTTP requests until the handler returned (streams and WebSockets: their whole life), by route.",
		Buckets: latencyBuckets,
	}, []string{"route"})
	m.terminals = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "sandboxkit_terminal_sessions_total",
		Help: "Terminals started, by api (tool: terminal_start; websocket: GET /sandboxes/{id}/terminal).",
	}, []string{"api"})
	m.denials = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "sandboxkit_egress_denials_total",
		Help: "Attempts of the server's sandboxes to reach what their egress policy refuses, as seen by the scrapes (each asks every sandbox's enforcer for its latest denials).",
	})
	for _, c := range []prometheus.Collector{m.creates, m.createTime, m.removals, m.toolCalls, m.toolTime, m.execTime,
		m.requests, m.requestTime, m.terminals, m.denials} {
		f(c)
	}
	f(&stateCollector{s: s, m: m})
	f(collectors.NewGoCollector())
	f(collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

func (m *metrics) handler() http.Handler {
	return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{MaxRequestsInFlight: 2, Timeout: 30 * time.Second})
}

func outcome(failed bool) string {
	if failed {
		return "error"
	}
	return "ok"
}

// stateCollector reports, at each scrape, what the server holds now: its
// sandboxes by backend, type and state (the backend's List), its pools'
// figures, its open terminals, and the egress denials since the last
// scrape.
type stateCollector struct {
	s *Server
	m *metrics
}

var (
	descSandboxes = prometheus.NewDesc("sandboxkit_sandboxes",
		"Sandboxes of this server's instance the backend lists, by backend, type and state (pool members included).",
		[]string{"backend", "type", "state"}, nil)
	descListErrors = prometheus.NewDesc("sandboxkit_scrape_list_errors",
		"1 when this scrape could not list the backend's sandboxes (sandboxkit_sandboxes is then missing).", nil, nil)
	descTerminals = prometheus.NewDesc("sandboxkit_terminals_open",
		"Terminals open in the server's sandboxes.", nil, nil)
	descPoolSize = prometheus.NewDesc("sandboxkit_pool_size",
		"A warm pool's target of ready sandboxes.", []string{"pool", "type"}, nil)
	descPoolReady = prometheus.NewDesc("sandboxkit_pool_ready",
		"A warm pool's sandboxes ready to be claimed.", []string{"pool", "type"}, nil)
	descPoolMaking = prometheus.NewDesc("sandboxkit_pool_making",
		"A warm pool's sandboxes being made.", []string{"pool", "type"}, nil)
	descPoolClaimed = prometheus.NewDesc("sandboxkit_pool_claims_total",
		"Creates served from a warm pool.", []string{"pool", "type"}, nil)
	descPoolFallbacks = prometheus.NewDesc("sandboxkit_pool_cold_fallbacks_total",
		"Creates that found their warm pool empty and made a sandbox cold.", []string{"pool", "type"}, nil)
	descPoolFailed = prometheus.NewDesc("sandboxkit_pool_failures_total",
		"A warm pool's sandboxes that failed to be made.", []string{"pool", "type"}, nil)
)

func (c *stateCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descSandboxes, descListErrors, descTerminals, descPoolSize, descPoolReady,
		descPoolMaking, descPoolClaimed, descPoolFallbacks, descPoolFailed} {
		ch <- d
	}
}

// scrapeTimeout bounds the backend calls of one scrape.
const scrapeTimeout = 10 * time.Second

func (c *stateCollector) Collect(ch chan<- prometheus.Metric) {
	s := c.s
	ctx, cancel := context.WithTimeout(s.life, scrapeTimeout)
	defer cancel()
	infos, err := s.opts.Backend.List(ctx, statusFilter(s.opts.Instance))
	if err != nil {
		ch <- prometheus.MustNewConstMetric(descListErrors, prometheus.GaugeValue, 1)
	} else {
		ch <- prometheus.MustNewConstMetric(descListErrors, prometheus.GaugeValue, 0)
		type key struct{ backend, typ, state string }
		counts := map[key]int{}
		for _, i := range infos {
			counts[key{i.Backend, i.Labels[LabelType], string(i.State)}]++
		}
		for k, n := range counts {
			ch <- prometheus.MustNewConstMetric(descSandboxes, prometheus.GaugeValue, float64(n), k.backend, k.typ, k.state)
		}
	}
	for _, st := range s.PoolStats() {
		labels := []string{st.Pool, st.Entry}
		ch <- prometheus.MustNewConstMetric(descPoolSize, prometheus.GaugeValue, float64(st.Size), labels...)
		ch <- prometheus.MustNewConstMetric(descPoolReady, prometheus.GaugeValue, float64(st.Ready), labels...)
		ch <- prometheus.MustNewConstMetric(descPoolMaking, prometheus.GaugeValue, float64(st.Making), labels...)
		ch <- prometheus.MustNewConstMetric(descPoolClaimed, prometheus.CounterValue, float64(st.Claimed), labels...)
		ch <- prometheus.MustNewConstMetric(descPoolFallbacks, prometheus.CounterValue, float64(st.ColdFallbacks), labels...)
		ch <- prometheus.MustNewConstMetric(descPoolFailed, prometheus.CounterValue, float64(st.Failed), labels...)
	}
	boxes := s.liveBoxes()
	open := 0
	for _, b := range boxes {
		open += b.terms.count()
	}
	ch <- prometheus.MustNewConstMetric(descTerminals, prometheus.GaugeValue, float64(open))
	c.countDenials(ctx, boxes)
}

// countDenials adds to the denials counter those of boxes' latest denials
// that are newer than the ones counted before.
func (c *stateCollector) countDenials(ctx context.Context, boxes []*box) {
	ec, ok := backend.AsBackend[backend.EgressController](c.s.opts.Backend)
	if !ok {
		return
	}
	m := c.m
	live := map[string]bool{}
	for _, b := range boxes {
		live[b.id] = true
		st, err := ec.EgressStatus(ctx, b.id)
		if err != nil {
			continue // no policy, or gone
		}
		m.mu.Lock()
		seen := m.seenDenial[b.id]
		for _, d := range st.Denials {
			if d.Kind != "" {
				continue // a request that carried credentials: let through
			}
			if d.Time.After(seen) {
				m.denials.Inc()
				m.seenDenial[b.id] = d.Time
				seen = d.Time
			}
		}
		m.mu.Unlock()
	}
	m.mu.Lock()
	for id := range m.seenDenial {
		if !live[id] {
			delete(m.seenDenial, id)
		}
	}
	m.mu.Unlock()
}

// liveBoxes returns the sandboxes the server holds now.
func (s *Server) liveBoxes() []*box {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*box, 0, len(s.boxes))
	for _, b := range s.boxes {
		if !b.gone {
			out = append(out, b)
		}
	}
	return out
}

// observeHTTP counts and times every request by the route it matched
// (next ends in a ServeMux, which sets the request's Pattern).
func (s *Server) observeHTTP(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		start := time.Now()
		sw := &statusWriter{ResponseWriter: w}
		r = r.WithContext(r.Context()) // a request of our own, whose Pattern the mux sets
		next.ServeHTTP(sw, r)
		route := r.Pattern
		if route == "" {
			route = "unmatched"
		}
		s.metrics.requests.WithLabelValues(route, strconv.Itoa(sw.code())).Inc()
		s.metrics.requestTime.WithLabelValues(route).Observe(time.Since(start).Seconds())
	})
}
