package sched

import (
	"bufio"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// cpuSnapshot is the machine's busy CPU time and this process's CPU time
// (children that were waited for included) at one moment.
type cpuSnapshot struct {
	at          time.Time
	busy, steal time.Duration // all CPUs, from /proc/stat
	self        time.Duration // this process and its reaped children
	ok          bool
}

// userHZ is the unit of /proc/stat (USER_HZ, 100 on every Linux ABI).
const userHZ = 100

func takeCPUSnapshot() cpuSnapshot {
	s := cpuSnapshot{at: time.Now()}
	var ru, rc unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil || unix.Getrusage(unix.RUSAGE_CHILDREN, &rc) != nil {
		return s
	}
	s.self = time.Duration(ru.Utime.Nano() + ru.Stime.Nano() + rc.Utime.Nano() + rc.Stime.Nano())
	f, err := os.Open("/proc/stat")
	if err != nil {
		return s
	}
	defer f.Close()
	line, err := bufio.NewReader(f).ReadString('\n')
	if err != nil || !strings.HasPrefix(line, "cpu ") {
		return s
	}
	// cpu user nice system idle iowait irq softirq steal ...
	fields := strings.Fields(line)[1:]
	var v [8]int64
	for i := 0; i < len(v) && i < len(fields); i++ {
		v[i], _ = strconv.ParseInt(fields[i], 10, 64)
	}
	tick := time.Second / userHZ
	s.busy = time.Duration(v[0]+v[1]+v[2]+v[5]+v[6]) * tick
	s.steal = time.Duration(v[7]) * tick
	s.ok = true
	return s
}

// foreignCPU returns how many cores' worth of CPU other processes used
// between a and b (busy time minus this process's and its reaped
// children's), and how many the hypervisor stole. Resolution: 10 ms of CPU
// time.
func foreignCPU(a, b cpuSnapshot) (foreign, steal float64) {
	wall := b.at.Sub(a.at).Seconds()
	if !a.ok || !b.ok || wall <= 0 {
		return -1, -1
	}
	other := (b.busy - a.busy) - (b.self - a.self)
	return max(other.Seconds(), 0) / wall, (b.steal - a.steal).Seconds() / wall
}
