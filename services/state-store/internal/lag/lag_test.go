package lag

import (
	"context"
	"errors"
	"testing"
)

func TestStatus(t *testing.T) {
	for _, c := range []struct {
		name          string
		last, applied uint64
		err           error
		lag           uint64
		wantErr       bool
	}{
		{"behind", 120, 100, nil, 20, false},
		{"caught up", 100, 100, nil, 0, false},
		{"stream re-created below the checkpoint", 5, 100, nil, 0, false},
		{"stream unreadable", 0, 100, errors.New("no responders"), 0, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := &Meter{Instance: "state-store/x", LastSeq: func(context.Context) (uint64, error) { return c.last, c.err }, Applied: func() uint64 { return c.applied }}
			st := m.Status(context.Background())
			if st.ProjectionLag != c.lag || (st.Error != "") != c.wantErr || st.AppliedSeq != c.applied {
				t.Fatalf("Status = %+v, want lag %d, error %v", st, c.lag, c.wantErr)
			}
		})
	}
}
