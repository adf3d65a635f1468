// SPDX-License-Identifier: Apache-2.0

// Package backlog exports work that waits (claims without addresses,
// reservations past their grace period) as two gauges: how many items
// wait, and how long the oldest has waited. Both are computed when
// Prometheus scrapes, so the age keeps growing while nothing happens,
// which is when an alert needs it most.
package backlog

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Since holds, per item, the moment from which it counts as waiting; an
// item whose moment is still ahead does not count yet. The zero value is
// empty and ready to use.
type Since[K comparable] struct {
	mu sync.Mutex
	m  map[K]time.Time
}

// Set records that k waits from t on.
func (s *Since[K]) Set(k K, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[K]time.Time{}
	}
	s.m[k] = t
}

// SetIfAbsent records that k waits from t on, unless it waits already:
// for items whose first sight is their moment.
func (s *Since[K]) SetIfAbsent(k K, t time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = map[K]time.Time{}
	}
	if _, ok := s.m[k]; !ok {
		s.m[k] = t
	}
}

// Delete records that k no longer waits.
func (s *Since[K]) Delete(k K) {
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.m, k)
}

// Stats returns how many items wait at now and how long the oldest has.
func (s *Since[K]) Stats(now time.Time) (n int, oldest time.Duration) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, t := range s.m {
		if age := now.Sub(t); age >= 0 {
			n++
			oldest = max(oldest, age)
		}
	}
	return n, oldest
}

// Source reports a backlog at now; (*Since).Stats is one.
type Source func(now time.Time) (n int, oldest time.Duration)

// Collector exports the sum of its sources' counts and the greatest of
// their ages. Sources come and go with the controllers that own them
// (tests run several controllers in one process); with none it exports 0.
type Collector struct {
	count, oldest *prometheus.Desc
	// Now is the clock; time.Now when nil.
	Now func() time.Time

	mu      sync.Mutex
	sources map[*Source]struct{}
}

var _ prometheus.Collector = (*Collector)(nil)

// New returns a Collector of the gauges countName and oldestName (in
// seconds).
func New(countName, countHelp, oldestName, oldestHelp string) *Collector {
	return &Collector{
		count:   prometheus.NewDesc(countName, countHelp, nil, nil),
		oldest:  prometheus.NewDesc(oldestName, oldestHelp, nil, nil),
		sources: map[*Source]struct{}{},
	}
}

// Add adds s until remove is called.
func (c *Collector) Add(s Source) (remove func()) {
	p := &s
	c.mu.Lock()
	c.sources[p] = struct{}{}
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		delete(c.sources, p)
		c.mu.Unlock()
	}
}

// Describe implements prometheus.Collector.
func (c *Collector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.count
	ch <- c.oldest
}

// Collect implements prometheus.Collector.
func (c *Collector) Collect(ch chan<- prometheus.Metric) {
	now := time.Now()
	if c.Now != nil {
		now = c.Now()
	}
	var total int
	var oldest time.Duration
	c.mu.Lock()
	for s := range c.sources {
		n, age := (*s)(now)
		total += n
		oldest = max(oldest, age)
	}
	c.mu.Unlock()
	ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(total))
	ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, oldest.Seconds())
}
