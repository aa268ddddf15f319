package main

import (
	"os"
	"strconv"
	"strings"
	"time"
)

// machineCPU reads the whole machine's CPU time, busy and in all, from
// /proc/stat's first line (every process: sshd and the shells too).
type machineCPU struct {
	busy, total float64 // seconds, over every core
	at          time.Time
}

func readMachineCPU() machineCPU {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 8 || f[0] != "cpu" {
		return machineCPU{}
	}
	var all, idle float64
	for i, s := range f[1:] {
		v, err := strconv.ParseFloat(s, 64)
		if err != nil || i >= 8 { // guest time is in user already
			break
		}
		all += v
		if i == 3 || i == 4 { // idle, iowait
			idle += v
		}
	}
	const hz = 100 // USER_HZ
	return machineCPU{busy: (all - idle) / hz, total: all / hz, at: time.Now()}
}

// coresBusy is how many cores were busy on average from m to now.
func (m machineCPU) coresBusy() float64 {
	now := readMachineCPU()
	wall := now.at.Sub(m.at).Seconds()
	if m.at.IsZero() || wall <= 0 {
		return 0
	}
	return (now.busy - m.busy) / wall
}
