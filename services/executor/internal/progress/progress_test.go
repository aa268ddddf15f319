package progress

import (
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		line string
		want int
		ok   bool
	}{
		{"PROGRESS: 42", 42, true},
		{"PROGRESS:0", 0, true},
		{"PROGRESS: 100", 100, true},
		{"  PROGRESS:   7  ", 7, true},
		{"PROGRESS: 50\r", 50, true},
		{"PROGRESS: 007", 7, true},
		{"PROGRESS: 150", 0, false},
		{"PROGRESS: 101", 0, false},
		{"PROGRESS: -1", 0, false},
		{"PROGRESS: +5", 0, false},
		{"PROGRESS: abc", 0, false},
		{"PROGRESS: 4.5", 0, false},
		{"PROGRESS: 42%", 0, false},
		{"PROGRESS: 1000", 0, false},
		{"PROGRESS:", 0, false},
		{"PROGRESS: ", 0, false},
		{"progress: 42", 0, false},
		{"PROGRESS 42", 0, false},
		{"build PROGRESS: 42", 0, false},
		{"PROGRESS: 4 2", 0, false},
		{"PROGRESS: ٤٢", 0, false}, // Arabic-Indic digits are not a percent
		{"", 0, false},
	} {
		got, ok := Parse(c.line)
		if got != c.want || ok != c.ok {
			t.Errorf("Parse(%q) = %d, %v; want %d, %v", c.line, got, ok, c.want, c.ok)
		}
	}
}

// FuzzParse: any line is a percent from 0 to 100 or not a progress line,
// never a panic, and a percent printed back parses to itself.
func FuzzParse(f *testing.F) {
	for _, s := range []string{"PROGRESS: 42", "PROGRESS: 150", "PROGRESS: abc", " PROGRESS:100 ", "PROGRESS: -0"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		p, ok := Parse(line)
		if !ok {
			return
		}
		if p < 0 || p > 100 {
			t.Fatalf("Parse(%q) = %d", line, p)
		}
		if q, ok := Parse("PROGRESS: " + itoa(p)); !ok || q != p {
			t.Fatalf("round trip of %d: %d %v", p, q, ok)
		}
	})
}

func itoa(n int) string {
	if n < 10 {
		return string(rune('0' + n))
	}
	return itoa(n/10) + string(rune('0'+n%10))
}

func TestThrottle(t *testing.T) {
	t.Parallel()
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	var th Throttle // MinGap: 250ms
	if pub, _ := th.Offer(10, at(0)); !pub {
		t.Fatal("first percent not published")
	}
	if pub, wait := th.Offer(10, at(500)); pub || wait != 0 {
		t.Fatal("an unchanged percent published or held")
	}
	if pub, _ := th.Offer(20, at(600)); !pub {
		t.Fatal("a changed percent after the gap not published")
	}
	pub, wait := th.Offer(30, at(700))
	if pub || wait != 150*time.Millisecond {
		t.Fatalf("too soon: publish %v, wait %v", pub, wait)
	}
	if pub, wait := th.Offer(40, at(750)); pub || wait != 100*time.Millisecond {
		t.Fatalf("too soon again: publish %v, wait %v", pub, wait)
	}
	if _, ok, w := th.Due(at(800)); ok || w != 50*time.Millisecond {
		t.Fatalf("held percent due early (wait %v)", w)
	}
	if p, ok, _ := th.Due(at(850)); !ok || p != 40 {
		t.Fatalf("held percent: %d %v, want the latest, 40", p, ok)
	}
	if _, ok, _ := th.Due(at(2000)); ok {
		t.Fatal("a percent due twice")
	}
	// held, then back to the published one: nothing to say
	th.Offer(50, at(900))
	th.Offer(40, at(950))
	if _, ok := th.Flush(at(960)); ok {
		t.Fatal("a percent flushed that equals the one published")
	}
	// held at the end: flushed whatever the time
	if pub, _ := th.Offer(100, at(1200)); !pub {
		t.Fatal("100 after the gap was not published at once")
	}
	th.Offer(99, at(1210))
	if p, ok := th.Flush(at(1210)); !ok || p != 99 {
		t.Fatalf("flush: %d %v", p, ok)
	}
}
