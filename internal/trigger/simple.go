package trigger

import (
	"math"
	"time"
)

// Simple triggers (Quartz SimpleTriggerImpl): fire k (0 ≤ k ≤ repeatCount, or unbounded when
// repeatCount is -1) at start + k·interval, before the end time.

const repeatIndefinitely = -1

func (t *Trigger) simpleFireTimeAfter(c *compiled, after time.Time) time.Time {
	rc := t.Simple.RepeatCount
	if t.TimesTriggered > rc && rc != repeatIndefinitely {
		return time.Time{}
	}
	start := t.start()
	if rc == 0 && !after.Before(start) {
		return time.Time{}
	}
	startMs, afterMs := start.UnixMilli(), after.UnixMilli()
	endMs := int64(math.MaxInt64)
	if e, ok := t.end(); ok {
		endMs = e.UnixMilli()
	}
	if endMs <= afterMs {
		return time.Time{}
	}
	if afterMs < startMs {
		return time.UnixMilli(startMs).UTC()
	}
	iv := c.interval.Milliseconds()
	if iv <= 0 {
		return time.Time{}
	}
	n := (afterMs-startMs)/iv + 1
	if n > int64(rc) && rc != repeatIndefinitely {
		return time.Time{}
	}
	if n > (math.MaxInt64-startMs)/iv {
		return time.Time{}
	}
	ft := startMs + n*iv
	if endMs <= ft {
		return time.Time{}
	}
	return time.UnixMilli(ft).UTC()
}

// simpleNumTimesFiredBetween is Quartz's computeNumTimesFiredBetween.
func simpleNumTimesFiredBetween(c *compiled, start, end time.Time) int {
	iv := c.interval.Milliseconds()
	if iv < 1 {
		return 0
	}
	return int(int32((end.UnixMilli() - start.UnixMilli()) / iv)) // Java's (int) cast
}

func (t *Trigger) simpleFinalFireTime(c *compiled) time.Time {
	rc := t.Simple.RepeatCount
	start := t.start()
	end, hasEnd := t.end()
	if rc == 0 {
		return start
	}
	if rc == repeatIndefinitely {
		if !hasEnd {
			return time.Time{}
		}
		return t.simpleFireTimeBefore(c, end)
	}
	last := start.UnixMilli() + int64(rc)*c.interval.Milliseconds()
	if !hasEnd || last < end.UnixMilli() {
		return time.UnixMilli(last).UTC()
	}
	return t.simpleFireTimeBefore(c, end)
}

// simpleFireTimeBefore is Quartz's getFireTimeBefore (which, despite its name, can return
// `end` itself when it falls on the schedule).
func (t *Trigger) simpleFireTimeBefore(c *compiled, end time.Time) time.Time {
	start := t.start()
	if end.Before(start) {
		return time.Time{}
	}
	n := simpleNumTimesFiredBetween(c, start, end)
	return time.UnixMilli(start.UnixMilli() + int64(n)*c.interval.Milliseconds()).UTC()
}

func (t *Trigger) simpleUpdateAfterMisfire(c *compiled, cal Calendar, now time.Time, instr string) {
	rc := t.Simple.RepeatCount
	switch instr {
	case "smart_policy":
		switch {
		case rc == 0:
			instr = "fire_now"
		case rc == repeatIndefinitely:
			instr = "reschedule_next_with_remaining_count"
		default:
			instr = "reschedule_now_with_existing_repeat_count"
		}
	case "fire_now":
		if rc != 0 {
			instr = "reschedule_now_with_remaining_repeat_count"
		}
	}
	switch instr {
	case "fire_now":
		t.NextFireTime = now
	case "reschedule_next_with_existing_count":
		t.NextFireTime = t.skipExcluded(c, t.simpleFireTimeAfter(c, now), cal)
	case "reschedule_next_with_remaining_count":
		next := t.skipExcluded(c, t.simpleFireTimeAfter(c, now), cal)
		if !next.IsZero() {
			t.TimesTriggered += simpleNumTimesFiredBetween(c, t.NextFireTime, next)
		}
		t.NextFireTime = next
	case "reschedule_now_with_existing_repeat_count":
		if rc != 0 && rc != repeatIndefinitely {
			t.setSimpleRepeatCount(rc - t.TimesTriggered)
			t.TimesTriggered = 0
		}
		t.rescheduleNow(now)
	case "reschedule_now_with_remaining_repeat_count":
		missed := simpleNumTimesFiredBetween(c, t.NextFireTime, now)
		if rc != 0 && rc != repeatIndefinitely {
			remaining := max(rc-(t.TimesTriggered+missed), 0)
			t.setSimpleRepeatCount(remaining)
			t.TimesTriggered = 0
		}
		t.rescheduleNow(now)
	}
}

// setSimpleRepeatCount changes the repeat count without touching the caller's SimpleSchedule
// value (Definition holds a pointer that may be shared).
func (t *Trigger) setSimpleRepeatCount(n int) {
	s := *t.Simple
	s.RepeatCount = n
	t.Simple = &s
}

func (t *Trigger) rescheduleNow(now time.Time) {
	if e, ok := t.end(); ok && e.Before(now) {
		t.NextFireTime = time.Time{}
		return
	}
	n := now
	t.StartAt = &n
	t.NextFireTime = now
}
