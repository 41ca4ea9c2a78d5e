package main

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// progress reports a conversion: a bar on a terminal, log lines otherwise.
type progress interface {
	start(steps int, totalBytes int64)
	step(name, what string, bytes int64)
	finish(err error)
}

func newProgress(mode string, w io.Writer) progress {
	if mode == "auto" {
		mode = "log"
		if isTerminal(w) {
			mode = "bar"
		}
	}
	switch mode {
	case "bar":
		return &barProgress{w: w}
	case "log":
		return &logProgress{log: slog.New(slog.NewTextHandler(w, nil))}
	}
	return noProgress{}
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

type noProgress struct{}

func (noProgress) start(int, int64)           {}
func (noProgress) step(string, string, int64) {}
func (noProgress) finish(error)               {}

// logProgress writes one structured line per layer or tensor.
type logProgress struct {
	log        *slog.Logger
	steps, n   int
	total, got int64
	t0         time.Time
}

func (p *logProgress) start(steps int, total int64) {
	p.steps, p.total, p.t0 = steps, total, time.Now()
	p.log.Info("pack started", "steps", steps, "input_bytes", total)
}

func (p *logProgress) step(name, what string, bytes int64) {
	p.n++
	p.got += bytes
	p.log.Info("packed", "step", fmt.Sprintf("%d/%d", p.n, p.steps), "name", name, "what", what,
		"input_bytes", bytes, "rate_mb_s", fmt.Sprintf("%.0f", float64(p.got)/1e6/max(time.Since(p.t0).Seconds(), 1e-9)))
}

func (p *logProgress) finish(err error) {
	if err != nil {
		p.log.Error("pack failed", "err", err)
		return
	}
	p.log.Info("pack converted", "steps", p.n, "input_bytes", p.got, "seconds", fmt.Sprintf("%.2f", time.Since(p.t0).Seconds()))
}

// barProgress redraws one line at most ten times a second.
type barProgress struct {
	w          io.Writer
	steps, n   int
	total, got int64
	t0, last   time.Time
	name       string
}

func (p *barProgress) start(steps int, total int64) {
	p.steps, p.total, p.t0 = steps, total, time.Now()
	p.draw(true)
}

func (p *barProgress) step(name, _ string, bytes int64) {
	p.n++
	p.got += bytes
	p.name = name
	p.draw(p.n == p.steps)
}

func (p *barProgress) draw(force bool) {
	if !force && time.Since(p.last) < 100*time.Millisecond {
		return
	}
	p.last = time.Now()
	frac := 1.0
	if p.total > 0 {
		frac = float64(p.got) / float64(p.total)
	} else if p.steps > 0 {
		frac = float64(p.n) / float64(p.steps)
	}
	const width = 30
	filled := int(frac * width)
	bar := strings.Repeat("=", filled) + strings.Repeat(" ", width-filled)
	rate := float64(p.got) / 1e6 / max(time.Since(p.t0).Seconds(), 1e-9)
	name := p.name
	if len(name) > 40 {
		name = "..." + name[len(name)-37:]
	}
	fmt.Fprintf(p.w, "\r\x1b[Kpack [%s] %3.0f%%  %d/%d  %s/%s  %.0f MB/s  %s", bar, 100*frac, p.n, p.steps,
		humanBytes(p.got), humanBytes(p.total), rate, name)
}

func (p *barProgress) finish(err error) {
	p.draw(true)
	fmt.Fprintln(p.w)
}
