package trigger

import (
	"errors"
	"slices"
	"strings"
	"time"
)

// maxYear is Quartz's CronExpression.MAX_YEAR: the year of the clock when the class was loaded
// plus 100. Quartz stops looking for fire times after it (and `*` in the year field means
// 1970..maxYear). It is pinned to at least 2126 so that results do not depend on the clock of
// the machine running the tests (the reference vectors were computed in 2026).
var maxYear = max(2126, time.Now().Year()+100)

// giveUpYear is where Quartz's getTimeAfter stops unconditionally.
const giveUpYear = 2999

// maxCronSteps bounds one Next call. Quartz's search is bounded by the year limits above; the
// bound is a second guard so that no expression can make a caller spin.
const maxCronSteps = 1 << 20

// CronExpression is a parsed Quartz cron expression: seconds minutes hours day-of-month month
// day-of-week [year]. It is immutable and safe for concurrent use.
type CronExpression struct {
	expr           string // Quartz's normalised text: the input in upper case
	sets           [numFields][]int
	lastdayOfWeek  bool
	nthdayOfWeek   int
	lastdayOfMonth bool
	nearestWeekday bool
	lastdayOffset  int
}

// ParseCron parses expr in Quartz 2.3.2's dialect and accepts exactly what Quartz accepts
// (including its lenient oddities such as ignored trailing characters), except expressions
// Quartz accepts but cannot evaluate: 'L' alone in the seconds, minutes, hours or month field
// (Quartz throws NoSuchElementException at the first evaluation), 'W' on day 0 and 'L-nW' with
// n ≥ 28 (Quartz loops forever on them, the latter when the search reaches February). Errors
// are *CronError.
func ParseCron(expr string) (ce *CronExpression, err error) {
	upper := strings.ToUpper(expr)
	p := &cronParser{}
	for i := range p.sets {
		p.sets[i] = map[int]bool{}
	}
	field, tokStart, subStart := -1, 0, 0
	token := ""
	defer func() {
		r := recover()
		if r == nil {
			return
		}
		pf, ok := r.(parseFail)
		if !ok {
			panic(r)
		}
		pos := tokStart + subStart
		if pf.off > 0 {
			pos += pf.off
		}
		name := ""
		if field >= 0 && field < numFields {
			name = fieldNames[field]
		}
		ce, err = nil, &CronError{Expr: expr, Field: name, Token: token, Position: pos, Reason: pf.reason}
	}()

	toks := splitPositions(upper, " \t")
	exprOn := fSecond
	for _, tk := range toks {
		if exprOn > fYear {
			break
		}
		field, tokStart, subStart, token = exprOn, tk.pos, 0, tk.s
		s := tk.s
		if exprOn == fDayOfMonth && strings.Contains(s, "L") && len(s) > 1 && strings.Contains(s, ",") {
			fail(-1, "'L' and 'LW' cannot be combined with other days of the month")
		}
		if exprOn == fDayOfWeek && strings.Contains(s, "L") && len(s) > 1 && strings.Contains(s, ",") {
			fail(-1, "'L' cannot be combined with other days of the week")
		}
		if exprOn == fDayOfWeek && strings.Count(s, "#") > 1 {
			fail(-1, "only one '#' (nth day of the month) is supported")
		}
		for _, v := range splitPositions(s, ",") {
			subStart = v.pos
			p.storeExpressionVals(v.s, exprOn)
		}
		exprOn++
	}
	field, token = -1, ""
	if exprOn <= fDayOfWeek {
		tokStart, subStart = len(expr), 0
		fail(-1, "expression has %d of the 6 required fields: seconds minutes hours day-of-month month day-of-week [year]", exprOn)
	}
	if exprOn <= fYear {
		p.storeExpressionVals("*", fYear)
	}
	domSpec := !p.sets[fDayOfMonth][noSpec]
	dowSpec := !p.sets[fDayOfWeek][noSpec]
	if domSpec == dowSpec {
		if len(toks) > fDayOfWeek {
			field, tokStart, token = fDayOfWeek, toks[fDayOfWeek].pos, toks[fDayOfWeek].s
		}
		fail(-1, "day-of-week and day-of-month cannot both be specified; use '?' in one of them")
	}

	c := &CronExpression{
		expr:           upper,
		lastdayOfWeek:  p.lastdayOfWeek,
		nthdayOfWeek:   p.nthdayOfWeek,
		lastdayOfMonth: p.lastdayOfMonth,
		nearestWeekday: p.nearestWeekday,
		lastdayOffset:  p.lastdayOffset,
	}
	for i := range p.sets {
		c.sets[i] = sortedKeys(p.sets[i])
	}
	// Expressions Quartz accepts but cannot evaluate.
	for f := range numFields {
		if f == fYear || len(c.sets[f]) > 0 {
			continue
		}
		if f == fDayOfMonth && (c.lastdayOfMonth || !domSpec) {
			continue
		}
		field, token, subStart = f, "", 0
		if f < len(toks) {
			tokStart, token = toks[f].pos, toks[f].s
		}
		if strings.Contains(token, "L") {
			fail(-1, "'L' is only meaningful in the day-of-month and day-of-week fields; it selects no %s here (Quartz fails on it at the first evaluation)", fieldNames[f])
		}
		fail(-1, "the %s field selects no value", fieldNames[f])
	}
	if c.nearestWeekday && !c.lastdayOfMonth && domSpec && c.sets[fDayOfMonth][0] == 0 {
		field, tokStart, subStart, token = fDayOfMonth, toks[fDayOfMonth].pos, 0, toks[fDayOfMonth].s
		fail(-1, "'W' needs a day of month between 1 and 31, not 0 (Quartz never returns from it)")
	}
	if c.nearestWeekday && c.lastdayOfMonth && c.lastdayOffset >= 28 {
		field, tokStart, subStart, token = fDayOfMonth, toks[fDayOfMonth].pos, 0, toks[fDayOfMonth].s
		fail(-1, "'L-%dW' falls before the first of February, where Quartz never returns from it; use an offset of at most 27", c.lastdayOffset)
	}
	return c, nil
}

type posToken struct {
	s   string
	pos int
}

// splitPositions splits s at any of the separator bytes, dropping empty pieces
// (java.util.StringTokenizer), and remembers where each piece starts.
func splitPositions(s, seps string) []posToken {
	var out []posToken
	start := -1
	for i := 0; i <= len(s); i++ {
		if i == len(s) || strings.IndexByte(seps, s[i]) >= 0 {
			if start >= 0 {
				out = append(out, posToken{s: s[start:i], pos: start})
				start = -1
			}
			continue
		}
		if start < 0 {
			start = i
		}
	}
	return out
}

// MustParseCron is ParseCron for expressions known to be valid (tests, constants).
func MustParseCron(expr string) *CronExpression {
	c, err := ParseCron(expr)
	if err != nil {
		panic(err)
	}
	return c
}

// String returns the expression in Quartz's normalised form (getCronExpression: the input in
// upper case). Parsing it again gives an identical expression.
func (c *CronExpression) String() string { return c.expr }

// Equal reports whether two parsed expressions select the same times.
func (c *CronExpression) Equal(o *CronExpression) bool {
	if c.lastdayOfWeek != o.lastdayOfWeek || c.nthdayOfWeek != o.nthdayOfWeek ||
		c.lastdayOfMonth != o.lastdayOfMonth || c.nearestWeekday != o.nearestWeekday ||
		c.lastdayOffset != o.lastdayOffset {
		return false
	}
	for i := range c.sets {
		if !slices.Equal(c.sets[i], o.sets[i]) {
			return false
		}
	}
	return true
}

// errNoValue is used internally when a set that must not be empty is (guarded at parse time).
var errNoValue = errors.New("empty value set")

func tailFirst(set []int, v int) (int, bool) {
	i, _ := slices.BinarySearch(set, v)
	if i < len(set) {
		return set[i], true
	}
	return 0, false
}

func first(set []int) int {
	if len(set) == 0 {
		panic(errNoValue) // unreachable: ParseCron rejects empty sets that are read
	}
	return set[0]
}

func contains(set []int, v int) bool {
	_, ok := slices.BinarySearch(set, v)
	return ok
}

// Next returns the first time strictly after `after` that the expression selects, evaluated
// in loc (nil means UTC) and returned in loc, exactly as Quartz's
// CronExpression.getTimeAfter: results are whole seconds; a time in a spring-forward gap is
// skipped, not shifted; in a fall-back overlap only the second occurrence fires. ok is false
// when there is none (Quartz returns null), e.g. when the year field is exhausted or the
// search passes Quartz's give-up year.
func (c *CronExpression) Next(after time.Time, loc *time.Location) (next time.Time, ok bool) {
	if loc == nil {
		loc = time.UTC
	}
	if after.Year() > giveUpYear+1 {
		return time.Time{}, false
	}
	afterMs := after.UnixMilli() + 1000
	cl := newJcal(loc, time.UnixMilli(afterMs))
	cl.setMilli(0)
	seconds, minutes, hours := c.sets[fSecond], c.sets[fMinute], c.sets[fHour]
	dom, months, dow, years := c.sets[fDayOfMonth], c.sets[fMonth], c.sets[fDayOfWeek], c.sets[fYear]

	for range maxCronSteps {
		if cl.getYear() > giveUpYear {
			return time.Time{}, false
		}
		sec := cl.getSecond()
		min := cl.getMinute()
		if v, ok := tailFirst(seconds, sec); ok {
			sec = v
		} else {
			sec = first(seconds)
			min++
			cl.setMinute(min)
		}
		cl.setSecond(sec)

		min = cl.getMinute()
		hr := cl.getHour()
		t := -1
		if v, ok := tailFirst(minutes, min); ok {
			t = min
			min = v
		} else {
			min = first(minutes)
			hr++
		}
		if min != t {
			cl.setSecond(0)
			cl.setMinute(min)
			setCalendarHour(cl, hr)
			continue
		}
		cl.setMinute(min)

		hr = cl.getHour()
		day := cl.getDay()
		t = -1
		if v, ok := tailFirst(hours, hr); ok {
			t = hr
			hr = v
		} else {
			hr = first(hours)
			day++
		}
		if hr != t {
			cl.setSecond(0)
			cl.setMinute(0)
			cl.setDay(day)
			setCalendarHour(cl, hr)
			continue
		}
		cl.setHour(hr)

		day = cl.getDay()
		mon := cl.getMonth() + 1
		t = -1
		tmon := mon
		domSpec := !contains(dom, noSpec)
		dowSpec := !contains(dow, noSpec)
		if domSpec && !dowSpec {
			stFirst, stOK := tailFirst(dom, day)
			switch {
			case c.lastdayOfMonth && !c.nearestWeekday:
				t = day
				day = lastDayOfMonth(mon, cl.getYear()) - c.lastdayOffset
				if t > day {
					mon++
					if mon > 12 {
						mon = 1
						tmon = 3333
						cl.addYears(1)
					}
					day = 1
				}
			case c.lastdayOfMonth: // LW
				t = day
				day = lastDayOfMonth(mon, cl.getYear()) - c.lastdayOffset
				day = nearestWeekdayOf(cl, loc, day, mon, sec, min, hr, afterMs, &mon, func() int { return 1 })
			case c.nearestWeekday:
				t = day
				day = first(dom)
				day = nearestWeekdayOf(cl, loc, day, mon, sec, min, hr, afterMs, &mon, func() int { return first(dom) })
			case stOK:
				t = day
				day = stFirst
				if day > lastDayOfMonth(mon, cl.getYear()) {
					day = first(dom)
					mon++
				}
			default:
				day = first(dom)
				mon++
			}
			if day != t || mon != tmon {
				cl.setSecond(0)
				cl.setMinute(0)
				cl.setHour(0)
				cl.setDay(day)
				cl.setMonth(mon - 1)
				continue
			}
		} else if dowSpec && !domSpec {
			switch {
			case c.lastdayOfWeek:
				want := first(dow)
				cDow := cl.getDayOfWeek()
				daysToAdd := 0
				if cDow < want {
					daysToAdd = want - cDow
				}
				if cDow > want {
					daysToAdd = want + (7 - cDow)
				}
				lDay := lastDayOfMonth(mon, cl.getYear())
				if day+daysToAdd > lDay {
					setStartOfMonth(cl, mon)
					continue
				}
				for day+daysToAdd+7 <= lDay {
					daysToAdd += 7
				}
				day += daysToAdd
				if daysToAdd > 0 {
					setStartOfDay(cl, day, mon-1)
					continue
				}
			case c.nthdayOfWeek != 0:
				want := first(dow)
				cDow := cl.getDayOfWeek()
				daysToAdd := 0
				if cDow < want {
					daysToAdd = want - cDow
				} else if cDow > want {
					daysToAdd = want + (7 - cDow)
				}
				dayShifted := daysToAdd > 0
				day += daysToAdd
				weekOfMonth := day / 7
				if day%7 > 0 {
					weekOfMonth++
				}
				daysToAdd = (c.nthdayOfWeek - weekOfMonth) * 7
				day += daysToAdd
				if daysToAdd < 0 || day > lastDayOfMonth(mon, cl.getYear()) {
					setStartOfMonth(cl, mon)
					continue
				} else if daysToAdd > 0 || dayShifted {
					setStartOfDay(cl, day, mon-1)
					continue
				}
			default:
				cDow := cl.getDayOfWeek()
				want := first(dow)
				if v, ok := tailFirst(dow, cDow); ok {
					want = v
				}
				daysToAdd := 0
				if cDow < want {
					daysToAdd = want - cDow
				}
				if cDow > want {
					daysToAdd = want + (7 - cDow)
				}
				lDay := lastDayOfMonth(mon, cl.getYear())
				if day+daysToAdd > lDay {
					setStartOfMonth(cl, mon)
					continue
				} else if daysToAdd > 0 {
					setStartOfDay(cl, day+daysToAdd, mon-1)
					continue
				}
			}
		} else {
			return time.Time{}, false // unreachable: rejected by ParseCron
		}
		cl.setDay(day)

		mon = cl.getMonth() + 1
		year := cl.getYear()
		t = -1
		if year > maxYear {
			return time.Time{}, false
		}
		if v, ok := tailFirst(months, mon); ok {
			t = mon
			mon = v
		} else {
			mon = first(months)
			year++
		}
		if mon != t {
			cl.setSecond(0)
			cl.setMinute(0)
			cl.setHour(0)
			cl.setDay(1)
			cl.setMonth(mon - 1)
			cl.setYear(year)
			continue
		}
		cl.setMonth(mon - 1)

		year = cl.getYear()
		t = -1
		if v, ok := tailFirst(years, year); ok {
			t = year
			year = v
		} else {
			return time.Time{}, false // ran out of years
		}
		if year != t {
			cl.setSecond(0)
			cl.setMinute(0)
			cl.setHour(0)
			cl.setDay(1)
			cl.setMonth(0)
			cl.setYear(year)
			continue
		}
		cl.setYear(year)
		return cl.time().In(loc), true
	}
	return time.Time{}, false
}

// nearestWeekdayOf is the 'W' step shared by "nW" and "LW": move day (of month mon) to the
// nearest weekday within the month; if that is before the search start, move to the next month
// (setting *monOut) and return the day resetDay gives.
func nearestWeekdayOf(cl *jcal, loc *time.Location, day, mon, sec, min, hr int, afterMs int64, monOut *int, resetDay func() int) int {
	year := cl.getYear()
	// Quartz uses a fresh Calendar (Calendar.getInstance) for this test; its millisecond field is
	// the wall clock's, which makes Quartz's result depend on the clock when `after` has
	// milliseconds. We use 0, i.e. compare whole seconds.
	tcal := newJcal(loc, time.UnixMilli(cl.instant))
	tcal.setMilli(0)
	tcal.setSecond(0)
	tcal.setMinute(0)
	tcal.setHour(0)
	tcal.setDay(day)
	tcal.setMonth(mon - 1)
	tcal.setYear(year)
	ldom := lastDayOfMonth(mon, year)
	dow := tcal.getDayOfWeek()
	switch {
	case dow == 7 && day == 1:
		day += 2
	case dow == 7:
		day--
	case dow == 1 && day == ldom:
		day -= 2
	case dow == 1:
		day++
	}
	tcal.setSecond(sec)
	tcal.setMinute(min)
	tcal.setHour(hr)
	tcal.setDay(day)
	tcal.setMonth(mon - 1)
	if tcal.time().UnixMilli() < afterMs-afterMs%1000 {
		*monOut = mon + 1
		return resetDay()
	}
	return day
}

func setStartOfMonth(cl *jcal, mon int) {
	cl.setSecond(0)
	cl.setMinute(0)
	cl.setHour(0)
	cl.setDay(1)
	cl.setMonth(mon)
}

func setStartOfDay(cl *jcal, day, month0 int) {
	cl.setSecond(0)
	cl.setMinute(0)
	cl.setHour(0)
	cl.setDay(day)
	cl.setMonth(month0)
}

// setCalendarHour is Quartz's: set the hour; if the zone moved it (a gap), take the next hour.
func setCalendarHour(cl *jcal, hour int) {
	cl.setHour(hour)
	if cl.getHour() != hour && hour != 24 {
		cl.setHour(hour + 1)
	}
}
