package ipc

import (
	"testing"
	"time"
)

// TestSpinnerBudget: the budget covers the usual wait when it fits under the ceiling,
// survives a minority of long waits, and drops to the floor for a slow or idle peer.
func TestSpinnerBudget(t *testing.T) {
	us := func(d int64) int64 { return d * int64(time.Microsecond) }
	s := newSpinner(50*time.Microsecond, 2*time.Millisecond)
	if s.budget() != us(50) {
		t.Fatalf("initial budget %d", s.budget())
	}
	// a decode loop: mostly 20 us gaps, one in 8 a 300 us attention gap
	for i := 0; i < 64; i++ {
		d := us(20)
		if i%8 == 0 {
			d = us(300)
		}
		s.observe(d)
	}
	if b := s.budget(); b < us(300) || b > us(500) {
		t.Fatalf("decode-loop budget %v, want just above the 300 us gaps", time.Duration(b))
	}
	// mostly long waits (a slow peer): only the floor
	for i := 0; i < 64; i++ {
		s.observe(us(5000))
	}
	if b := s.budget(); b != us(50) {
		t.Fatalf("slow-peer budget %v, want the floor", time.Duration(b))
	}
	// long p90 but short median: cover the median
	for i := 0; i < 64; i++ {
		d := us(100)
		if i%4 == 0 {
			d = us(9000)
		}
		s.observe(d)
	}
	if b := s.budget(); b < us(125) || b > us(200) {
		t.Fatalf("mixed budget %v, want just above the 100 us median", time.Duration(b))
	}
	// a decode loop with the host's step between tokens (1.8 ms, under the ceiling) once in
	// 32 waits: spin through it, up to the ceiling
	for i := 0; i < 64; i++ {
		d := us(20)
		if i%32 == 0 {
			d = us(1800)
		}
		s.observe(d)
	}
	if b := s.budget(); b != us(2000) {
		t.Fatalf("budget with a rare gap under the ceiling %v, want the ceiling", time.Duration(b))
	}
}
