package main

import (
	"context"
	"time"

	"github.com/prometheus/procfs"

	"github.com/certready/certready/e2e/localcluster"
)

type footprintSample struct {
	Phase      string  `json:"phase"`
	Process    string  `json:"process"`
	RSSBytes   int64   `json:"rssBytes"`
	Millicores float64 `json:"millicores"`
}

func (b *bench) footprint(ctx context.Context, phase string, window time.Duration) []footprintSample {
	procs := map[string]*localcluster.Process{"agent": b.agent, "approver": b.approver}
	start := map[string]float64{}
	for name, p := range procs {
		start[name] = cpuSeconds(p.PID())
	}
	b.logf("footprint (%s): %s window", phase, window)
	time.Sleep(window)
	var out []footprintSample
	for _, name := range []string{"agent", "approver"} {
		p := procs[name]
		out = append(out, footprintSample{Phase: phase, Process: name, RSSBytes: rssBytes(p.PID()),
			Millicores: (cpuSeconds(p.PID()) - start[name]) / window.Seconds() * 1000})
	}
	return out
}

// rssBytes is pid's resident set (0 when it cannot be read).
func rssBytes(pid int) int64 {
	stat, err := procStat(pid)
	if err != nil {
		return 0
	}
	return int64(stat.ResidentMemory())
}

// cpuSeconds is pid's user and system CPU time.
func cpuSeconds(pid int) float64 {
	stat, err := procStat(pid)
	if err != nil {
		return 0
	}
	return stat.CPUTime()
}

func procStat(pid int) (procfs.ProcStat, error) {
	p, err := procfs.NewProc(pid)
	if err != nil {
		return procfs.ProcStat{}, err
	}
	return p.Stat()
}
