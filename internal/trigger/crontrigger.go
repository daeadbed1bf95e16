package trigger

import "time"

// cronFireTimeAfter is Quartz CronTriggerImpl.getFireTimeAfter: the cron expression's next
// time after max(after, start-1s), not after the end time.
func (t *Trigger) cronFireTimeAfter(c *compiled, after time.Time) time.Time {
	start := t.start()
	if start.After(after) {
		after = start.Add(-time.Second)
	}
	end, hasEnd := t.end()
	if hasEnd && !after.Before(end) {
		return time.Time{}
	}
	next, ok := c.cron.Next(after, c.loc)
	if !ok {
		return time.Time{}
	}
	if hasEnd && next.After(end) {
		return time.Time{}
	}
	return next.UTC()
}
