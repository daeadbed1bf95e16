package trigger

import (
	"time"
)

// Calendar excludes times from a trigger's schedule (Quartz's org.quartz.Calendar). nil means
// no calendar. Implementations must be safe for concurrent use and cheap to call.
type Calendar interface {
	// IsTimeIncluded reports whether a trigger may fire at t.
	IsTimeIncluded(t time.Time) bool
	// NextIncludedTime returns the earliest time strictly after t that is included, or an
	// earlier time that is still after t (it is used to skip excluded stretches quickly and is
	// re-checked with IsTimeIncluded); the zero time when nothing after t is included.
	NextIncludedTime(t time.Time) time.Time
}

// Trigger is a Definition plus the state the store persists in typed columns.
type Trigger struct {
	Definition
	NextFireTime     time.Time // zero: will not fire again
	PreviousFireTime time.Time // zero: never fired
	TimesTriggered   int
}

// maxCalendarSkips bounds the loops that step over calendar exclusions one fire time at a time
// (Quartz's have no bound beyond the give-up year, which for a 1 ms interval is effectively
// none). With a Calendar whose NextIncludedTime is useful the loops take a few steps.
const maxCalendarSkips = 100000

// maxPreviewSteps bounds the fire times FireTimes and FireTimesBetween step through.
const maxPreviewSteps = 1000000

// New validates def and computes the first fire time (Quartz computeFirstFireTime). StartAt
// defaults to now. Like Quartz, a cron trigger's start time is truncated to the second (its
// first fire is the first matching second at or after it); the other kinds keep milliseconds.
// The returned Trigger's Definition has StartAt set, so the caller stores what was computed.
// If the schedule has no fire time at all New returns ErrNeverFires (Quartz refuses such
// triggers too).
func New(def Definition, now time.Time, cal Calendar) (*Trigger, error) {
	c, err := def.compile()
	if err != nil {
		return nil, err
	}
	start := now
	if def.StartAt != nil {
		start = *def.StartAt
	}
	start = start.Truncate(time.Millisecond)
	if c.kind == kindCron {
		start = start.Truncate(time.Second)
	}
	start = start.UTC()
	def.StartAt = &start
	if def.EndAt != nil {
		end := def.EndAt.Truncate(time.Millisecond).UTC()
		if end.Before(start) {
			return nil, fieldErr("endAt", "end time %s is before start time %s", end.Format(time.RFC3339Nano), start.Format(time.RFC3339Nano))
		}
		def.EndAt = &end
	}
	t := &Trigger{Definition: def}
	t.NextFireTime = t.computeFirstFireTime(c, cal)
	if t.NextFireTime.IsZero() {
		return nil, ErrNeverFires
	}
	return t, nil
}

func (t *Trigger) start() time.Time {
	if t.StartAt == nil {
		return time.Time{}
	}
	return *t.StartAt
}

func (t *Trigger) end() (time.Time, bool) {
	if t.EndAt == nil {
		return time.Time{}, false
	}
	return *t.EndAt, true
}

func utcMilli(x time.Time) time.Time { return time.UnixMilli(x.UnixMilli()).UTC() }

// fireTimeAfter is Quartz's getFireTimeAfter for the trigger's kind; zero means null.
func (t *Trigger) fireTimeAfter(c *compiled, after time.Time) time.Time {
	switch c.kind {
	case kindCron:
		return t.cronFireTimeAfter(c, after)
	case kindSimple:
		return t.simpleFireTimeAfter(c, after)
	case kindCalendarInterval:
		return t.calendarIntervalFireTimeAfter(c, after, false)
	case kindDailyTimeInterval:
		return t.dailyFireTimeAfter(c, after)
	}
	return time.Time{}
}

// skipExcluded is the loop every Quartz trigger runs after computing a fire time: while the
// calendar excludes it, take the next one. Quartz's simple, calendar-interval and
// daily-time-interval triggers also give up after the give-up year (yearGuard).
func (t *Trigger) skipExcluded(c *compiled, next time.Time, cal Calendar) time.Time {
	if cal == nil {
		return next
	}
	for range maxCalendarSkips {
		if next.IsZero() || cal.IsTimeIncluded(next) {
			return next
		}
		from := next
		if nic := cal.NextIncludedTime(next); nic.IsZero() {
			return time.Time{}
		} else if nic.After(next) {
			// Every fire time in (next, nic) is excluded: continue from just before nic.
			from = nic.Add(-time.Millisecond)
			if !from.After(next) {
				from = next
			}
		}
		next = t.fireTimeAfter(c, from)
		if c.kind != kindCron && !next.IsZero() && next.UTC().Year() > maxYear {
			return time.Time{}
		}
	}
	return time.Time{}
}

func (t *Trigger) computeFirstFireTime(c *compiled, cal Calendar) time.Time {
	var next time.Time
	switch c.kind {
	case kindCron:
		next = t.cronFireTimeAfter(c, t.start().Add(-time.Second))
	case kindDailyTimeInterval:
		next = t.dailyFirstFireTime(c)
	default:
		next = t.start()
	}
	return t.skipExcluded(c, next, cal)
}

// Triggered advances the trigger after a fire (Quartz triggered(cal)): PreviousFireTime =
// NextFireTime, TimesTriggered++, NextFireTime = the next fire time after it that cal includes
// (zero when there is none). A trigger whose Definition no longer validates gets no next fire
// time.
func (t *Trigger) Triggered(cal Calendar) {
	t.TimesTriggered++
	t.PreviousFireTime = t.NextFireTime
	c, err := t.compile()
	if err != nil || t.NextFireTime.IsZero() {
		t.NextFireTime = time.Time{}
		return
	}
	t.NextFireTime = t.skipExcluded(c, t.fireTimeAfter(c, t.NextFireTime), cal)
}

// IgnoresMisfires reports misfire == ignore_misfire_policy (Quartz
// MISFIRE_INSTRUCTION_IGNORE_MISFIRE_POLICY, -1): such a trigger is fired late rather than
// having its misfire handled, so the caller skips UpdateAfterMisfire for it.
func (t *Trigger) IgnoresMisfires() bool { return t.Misfire == "ignore_misfire_policy" }

// UpdateAfterMisfire applies the misfire instruction (Quartz updateAfterMisfire) at clock now.
// It may change NextFireTime, TimesTriggered and, for simple triggers, Simple.RepeatCount and
// StartAt (the reschedule_now_* instructions), so the caller stores the Definition again.
func (t *Trigger) UpdateAfterMisfire(cal Calendar, now time.Time) {
	c, err := t.compile()
	if err != nil {
		return
	}
	now = utcMilli(now)
	instr := t.misfire()
	if instr == "ignore_misfire_policy" {
		return
	}
	switch c.kind {
	case kindSimple:
		t.simpleUpdateAfterMisfire(c, cal, now, instr)
	default: // cron, calendarInterval, dailyTimeInterval share Quartz's two instructions
		if instr == "smart_policy" {
			instr = "fire_once_now"
		}
		switch instr {
		case "do_nothing":
			t.NextFireTime = t.skipExcluded(c, t.fireTimeAfter(c, now), cal)
		case "fire_once_now":
			t.NextFireTime = now
		}
	}
}

// UpdateWithNewCalendar recomputes NextFireTime after the trigger's calendar was replaced
// (Quartz's updateWithNewCalendar, run by storeCalendar with updateTriggers): the first fire
// time after the previous fire (after now when it never fired) that cal includes, stepping over
// fire times that lie more than misfireThreshold before now.
func (t *Trigger) UpdateWithNewCalendar(cal Calendar, now time.Time, misfireThreshold time.Duration) {
	c, err := t.compile()
	if err != nil {
		t.NextFireTime = time.Time{}
		return
	}
	now = utcMilli(now)
	after := t.PreviousFireTime
	if after.IsZero() {
		after = now
	}
	next := t.fireTimeAfter(c, after)
	if cal == nil {
		t.NextFireTime = next
		return
	}
	for range maxCalendarSkips {
		if next.IsZero() || cal.IsTimeIncluded(next) {
			t.NextFireTime = next
			return
		}
		next = t.fireTimeAfter(c, next)
		if next.IsZero() || next.UTC().Year() > maxYear {
			t.NextFireTime = time.Time{}
			return
		}
		if next.Before(now) && now.Sub(next) >= misfireThreshold {
			next = t.fireTimeAfter(c, next)
		}
	}
	t.NextFireTime = time.Time{}
}

// FinalFireTime returns the last time the trigger will fire (Quartz getFinalFireTime), ignoring
// calendars; ok is false when there is none or it is unbounded. Quartz 2.3.2 cannot compute
// it for cron triggers (CronExpression.getTimeBefore returns null), so neither do we.
func (t *Trigger) FinalFireTime() (time.Time, bool) {
	c, err := t.compile()
	if err != nil {
		return time.Time{}, false
	}
	var f time.Time
	switch c.kind {
	case kindSimple:
		f = t.simpleFinalFireTime(c)
	case kindCalendarInterval:
		f = t.calendarIntervalFinalFireTime(c)
	case kindDailyTimeInterval:
		f = t.dailyFinalFireTime(c)
	}
	return f, !f.IsZero()
}

// FireTimes returns up to n fire times strictly after `after` that the trigger will fire at
// from its current state (NextFireTime, TimesTriggered) with calendar cal, for previews. It
// does not change t.
func (t *Trigger) FireTimes(after time.Time, n int, cal Calendar) []time.Time {
	return t.fireTimes(after, time.Time{}, n, cal)
}

// ScheduledAtOrAfter returns the first time at or after x that the trigger's schedule selects,
// from its Definition alone (its start, end and repeat count included; its state and calendars
// not): what a time someone expected a fire at is compared with. Zero when there is none.
func (t *Trigger) ScheduledAtOrAfter(x time.Time) time.Time {
	c, err := t.compile()
	if err != nil {
		return time.Time{}
	}
	return t.fireTimeAfter(c, x.Add(-time.Millisecond))
}

// FireTimesBetween returns up to n fire times in (from, to], like FireTimes.
func (t *Trigger) FireTimesBetween(from, to time.Time, n int, cal Calendar) []time.Time {
	if !to.After(from) {
		return nil
	}
	return t.fireTimes(from, to, n, cal)
}

func (t *Trigger) fireTimes(after, to time.Time, n int, cal Calendar) []time.Time {
	if n <= 0 || t.NextFireTime.IsZero() {
		return nil
	}
	c, err := t.compile()
	if err != nil {
		return nil
	}
	cp := *t
	countsFires := c.kind == kindDailyTimeInterval && t.DailyTimeInterval.RepeatCount != repeatIndefinitely
	if !cp.NextFireTime.After(after) && !countsFires {
		// Jump over the fire times up to `after`. This keeps the repeat limit of simple triggers
		// (they count fires by position from their start); a daily-time-interval trigger with
		// a repeat count is stepped through instead, as its limit counts actual fires.
		cp.NextFireTime = cp.skipExcluded(c, cp.fireTimeAfter(c, after), cal)
	}
	var out []time.Time
	for steps := 0; len(out) < n && !cp.NextFireTime.IsZero() && steps < maxPreviewSteps; steps++ {
		if !to.IsZero() && cp.NextFireTime.After(to) {
			break
		}
		if cp.NextFireTime.After(after) {
			out = append(out, cp.NextFireTime)
		}
		prev := cp.NextFireTime
		cp.Triggered(cal)
		if !cp.NextFireTime.IsZero() && !cp.NextFireTime.After(prev) {
			break // defensive: a schedule must move forward
		}
	}
	return out
}
