package store

import "testing"

// A loop runs AtOnceDefault partitions' transactions at once unless told, never more than
// there are partitions (one in global mode: its single lock row serialises them anyway).
func TestConcurrency(t *testing.T) {
	for _, tc := range []struct {
		locks Locks
		want  int
	}{
		{Locks{Partitions: 8}, AtOnceDefault},
		{Locks{Partitions: 8, AtOnce: 4}, 4},
		{Locks{Partitions: 8, AtOnce: 1}, 1},
		{Locks{Partitions: 3, AtOnce: 8}, 3},
		{Locks{}, 1},
		{Locks{AtOnce: 4}, 1},
	} {
		if got := tc.locks.Concurrency(); got != tc.want {
			t.Errorf("%+v: Concurrency() = %d, want %d", tc.locks, got, tc.want)
		}
	}
}
