package trigger

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Field indexes of a cron expression, in Quartz's order.
const (
	fSecond = iota
	fMinute
	fHour
	fDayOfMonth
	fMonth
	fDayOfWeek
	fYear
	numFields
)

var fieldNames = [numFields]string{"seconds", "minutes", "hours", "day-of-month", "month", "day-of-week", "year"}

// Markers Quartz stores in the value sets next to real values: '*' (with the values) and '?'.
const (
	allSpec = 99
	noSpec  = 98
)

var monthNames = map[string]int{
	"JAN": 1, "FEB": 2, "MAR": 3, "APR": 4, "MAY": 5, "JUN": 6,
	"JUL": 7, "AUG": 8, "SEP": 9, "OCT": 10, "NOV": 11, "DEC": 12,
}

var dayNames = map[string]int{"SUN": 1, "MON": 2, "TUE": 3, "WED": 4, "THU": 5, "FRI": 6, "SAT": 7}

// CronError says why a cron expression was rejected and where.
type CronError struct {
	Expr     string // the expression as given
	Field    string // "seconds", "minutes", …, "year"; "" when the error is about the whole expression
	Token    string // the offending field text, when known
	Position int    // 0-based character offset in Expr (Quartz's ParseException convention)
	Reason   string
}

func (e *CronError) Error() string {
	if e.Field == "" {
		return fmt.Sprintf("%s (position %d)", e.Reason, e.Position)
	}
	return fmt.Sprintf("%s (%s field %q, position %d)", e.Reason, e.Field, e.Token, e.Position)
}

// parseFail is raised inside the parser (which mirrors Quartz's index-juggling code, where any
// out-of-range read is an error) and turned into a *CronError by ParseCron. It never escapes.
type parseFail struct {
	reason string
	off    int // offset in the current comma-separated value, -1 when unknown
}

func fail(off int, format string, args ...any) {
	panic(parseFail{reason: fmt.Sprintf(format, args...), off: off})
}

type cronParser struct {
	sets           [numFields]map[int]bool
	lastdayOfWeek  bool
	nthdayOfWeek   int
	lastdayOfMonth bool
	nearestWeekday bool
	lastdayOffset  int
}

func charAt(s string, i int) byte {
	if i < 0 || i >= len(s) {
		fail(i, "value ends too early")
	}
	return s[i]
}

func substring(s string, i, j int) string {
	if i < 0 || j > len(s) || i > j {
		fail(i, "value %q is too short here", s)
	}
	return s[i:j]
}

func isDigit(c byte) bool { return c >= '0' && c <= '9' }

// javaParseInt is Integer.parseInt: optional sign, decimal digits, 32-bit range.
func javaParseInt(s string, off int) int {
	v, err := strconv.ParseInt(s, 10, 32)
	if err != nil || s == "" || s[0] == '+' && len(s) == 1 {
		if ne, ok := err.(*strconv.NumError); ok && ne.Err == strconv.ErrRange {
			fail(off, "number %q is too large", s)
		}
		fail(off, "%q is not a number", s)
	}
	return int(v)
}

// getValue reads the digits starting at i, prefixed by the already-read digit(s) v.
func getValue(v int, s string, i int) (value, pos int) {
	c := charAt(s, i)
	b := []byte(strconv.Itoa(v))
	start := i
	for isDigit(c) {
		b = append(b, c)
		i++
		if i >= len(s) {
			break
		}
		c = s[i]
	}
	if i < len(s) {
		pos = i
	} else {
		pos = i + 1
	}
	return javaParseInt(string(b), start), pos
}

func matchesLastOffset(s string) bool { // Java: s.matches("^L-[0-9]*[W]?")
	if !strings.HasPrefix(s, "L-") {
		return false
	}
	r := strings.TrimSuffix(s[2:], "W")
	return strings.Trim(r, "0123456789") == ""
}

func (p *cronParser) add(typ, v int) { p.sets[typ][v] = true }

func (p *cronParser) storeExpressionVals(s string, typ int) {
	i := 0
	if i >= len(s) {
		return
	}
	c := s[i]
	if c >= 'A' && c <= 'Z' && s != "L" && s != "LW" && !matchesLastOffset(s) {
		switch typ {
		case fMonth, fDayOfWeek:
			if len(s) < 3 {
				fail(0, "%q is not a %s name; use three letters (%s)", s, fieldNames[typ], map[int]string{fMonth: "JAN-DEC", fDayOfWeek: "SUN-SAT"}[typ])
			}
		case fDayOfMonth:
			if c == 'L' || c == 'W' {
				fail(0, "invalid use of 'L' or 'W'; the day-of-month field takes L, L-n, LW, L-nW or nW (n a day)")
			}
			fail(0, "letters are only allowed in the month and day-of-week fields")
		case fYear:
			fail(0, "the year field takes numbers, e.g. 2027 or 2026-2030")
		default:
			fail(0, "letters are only allowed in the month and day-of-week fields (and L, W in the day fields)")
		}
		sub := substring(s, i, i+3)
		sval, eval := -1, -1
		switch typ {
		case fMonth:
			v, ok := monthNames[sub]
			if !ok {
				fail(i, "invalid month name %q (use JAN-DEC or 1-12)", sub)
			}
			sval = v
			if len(s) > i+3 && s[i+3] == '-' {
				i += 4
				if len(s) < i+3 {
					fail(i, "'-' must be followed by a three-letter month name (JAN-DEC)")
				}
				sub = substring(s, i, i+3)
				v, ok := monthNames[sub]
				if !ok {
					fail(i, "invalid month name %q (use JAN-DEC or 1-12)", sub)
				}
				eval = v
			}
		case fDayOfWeek:
			v, ok := dayNames[sub]
			if !ok {
				fail(i, "invalid day-of-week name %q (use SUN-SAT or 1-7)", sub)
			}
			sval = v
			if len(s) > i+3 {
				switch s[i+3] {
				case '-':
					i += 4
					if len(s) < i+3 {
						fail(i, "'-' must be followed by a three-letter day name (SUN-SAT)")
					}
					sub = substring(s, i, i+3)
					v, ok := dayNames[sub]
					if !ok {
						fail(i, "invalid day-of-week name %q (use SUN-SAT or 1-7)", sub)
					}
					eval = v
				case '#':
					i += 4
					n, ok := parseNth(s[i:])
					if !ok {
						fail(i, "'#' must be followed by a number between 1 and 5")
					}
					p.nthdayOfWeek = n
				case 'L':
					p.lastdayOfWeek = true
				}
			}
		default:
			fail(i, "names such as %q are only allowed in the month and day-of-week fields", sub)
		}
		incr := 0
		if eval != -1 {
			incr = 1
		}
		p.addToSet(sval, eval, incr, typ)
		return
	}
	switch {
	case c == '?':
		i++
		if i+1 < len(s) && s[i] != ' ' && s[i+1] != '\t' {
			fail(i, "unexpected character %q after '?'", s[i])
		}
		if typ != fDayOfWeek && typ != fDayOfMonth {
			fail(0, "'?' is only allowed in the day-of-month and day-of-week fields")
		}
		if typ == fDayOfWeek && !p.lastdayOfMonth {
			dom := p.sets[fDayOfMonth]
			if len(dom) == 0 {
				fail(0, "day-of-month field has no value")
			}
			if maxKey(dom) == noSpec {
				fail(0, "day-of-month and day-of-week cannot both be '?'; give a value in one of them")
			}
		}
		p.addToSet(noSpec, -1, 0, typ)
	case c == '*' || c == '/':
		if c == '*' && i+1 >= len(s) {
			p.addToSet(allSpec, -1, 0, typ)
			return
		}
		if c == '/' && (i+1 >= len(s) || s[i+1] == ' ' || s[i+1] == '\t') {
			fail(i, "'/' must be followed by an integer")
		}
		if c == '*' {
			i++
		}
		c = charAt(s, i)
		incr := 1
		if c == '/' {
			i++
			if i >= len(s) {
				fail(i, "'/' must be followed by an integer")
			}
			incr = javaParseInt(s[i:], i)
			checkIncrementRange(incr, typ, i)
		}
		p.addToSet(allSpec, -1, incr, typ)
	case c == 'L':
		i++
		if typ == fDayOfMonth {
			p.lastdayOfMonth = true
		}
		if typ == fDayOfWeek {
			p.addToSet(7, 7, 0, typ)
		}
		if typ == fDayOfMonth && len(s) > i {
			c = s[i]
			if c == '-' {
				v, pos := getValue(0, s, i+1)
				if v > 30 {
					fail(i+1, "offset from the last day must be at most 30, not %d", v)
				}
				p.lastdayOffset = v
				i = pos
			}
			if len(s) > i && s[i] == 'W' {
				p.nearestWeekday = true
			}
		}
	case isDigit(c):
		val := int(c - '0')
		i++
		if i >= len(s) {
			p.addToSet(val, -1, -1, typ)
			return
		}
		if isDigit(s[i]) {
			val, i = getValue(val, s, i)
		}
		p.checkNext(i, s, val, typ)
	default:
		fail(i, "unexpected character %q", c)
	}
}

func parseNth(s string) (int, bool) {
	n, err := strconv.ParseInt(s, 10, 32)
	if err != nil || n < 1 || n > 5 {
		return 0, false
	}
	return int(n), true
}

func maxKey(m map[int]bool) int {
	mx := -1 << 31
	for k := range m {
		mx = max(mx, k)
	}
	return mx
}

func checkIncrementRange(incr, typ, off int) {
	switch {
	case incr > 59 && (typ == fSecond || typ == fMinute):
		fail(off, "increment must be less than 60, not %d", incr)
	case incr > 23 && typ == fHour:
		fail(off, "increment must be less than 24, not %d", incr)
	case incr > 31 && typ == fDayOfMonth:
		fail(off, "increment must be at most 31, not %d", incr)
	case incr > 7 && typ == fDayOfWeek:
		fail(off, "increment must be at most 7, not %d", incr)
	case incr > 12 && typ == fMonth:
		fail(off, "increment must be at most 12, not %d", incr)
	}
}

func (p *cronParser) checkNext(pos int, s string, val, typ int) {
	i := pos
	if i >= len(s) {
		p.addToSet(val, -1, -1, typ)
		return
	}
	c := s[pos]
	switch c {
	case 'L':
		if typ != fDayOfWeek {
			fail(i, "'L' after a number is only allowed in the day-of-week field")
		}
		if val < 1 || val > 7 {
			fail(0, "day-of-week values must be between 1 and 7, not %d", val)
		}
		p.lastdayOfWeek = true
		p.add(typ, val)
		return
	case 'W':
		if typ != fDayOfMonth {
			fail(i, "'W' is only allowed in the day-of-month field")
		}
		if val > 31 {
			fail(i, "'W' needs a day of month between 1 and 31, not %d", val)
		}
		p.nearestWeekday = true
		p.add(typ, val)
		return
	case '#':
		if typ != fDayOfWeek {
			fail(i, "'#' is only allowed in the day-of-week field")
		}
		i++
		n, ok := parseNth(s[i:])
		if !ok {
			fail(i, "'#' must be followed by a number between 1 and 5")
		}
		p.nthdayOfWeek = n
		p.add(typ, val)
		return
	case '-':
		i++
		if i >= len(s) {
			fail(i, "'-' must be followed by a number")
		}
		c = s[i]
		if !isDigit(c) {
			fail(i, "'-' must be followed by a number")
		}
		end := int(c - '0')
		i++
		if i >= len(s) {
			p.addToSet(val, end, 1, typ)
			return
		}
		c = s[i]
		if isDigit(c) {
			end, i = getValue(end, s, i)
		}
		if i < len(s) && s[i] == '/' {
			i++
			c = charAt(s, i)
			if !isDigit(c) {
				fail(i, "'/' must be followed by an integer")
			}
			v2 := int(c - '0')
			i++
			if i >= len(s) {
				p.addToSet(val, end, v2, typ)
				return
			}
			if isDigit(s[i]) {
				v3, _ := getValue(v2, s, i)
				p.addToSet(val, end, v3, typ)
				return
			}
			p.addToSet(val, end, v2, typ)
			return
		}
		p.addToSet(val, end, 1, typ)
		return
	case '/':
		if i+1 >= len(s) || s[i+1] == ' ' || s[i+1] == '\t' {
			fail(i, "'/' must be followed by an integer")
		}
		i++
		c = s[i]
		if !isDigit(c) {
			fail(i, "'/' must be followed by an integer")
		}
		v2 := int(c - '0')
		i++
		if i >= len(s) {
			checkIncrementRange(v2, typ, i)
			p.addToSet(val, -1, v2, typ)
			return
		}
		if isDigit(s[i]) {
			v3, _ := getValue(v2, s, i)
			checkIncrementRange(v3, typ, i)
			p.addToSet(val, -1, v3, typ)
			return
		}
		fail(i, "unexpected character %q after '/'", s[i])
	}
	p.addToSet(val, -1, 0, typ)
}

// maxStoredYear bounds the years kept from a range such as 2026-999999999: Quartz never
// returns a time after its give-up year, so larger years can never fire.
const maxStoredYear = 3000

func (p *cronParser) addToSet(val, end, incr, typ int) {
	switch typ {
	case fSecond, fMinute:
		if (val < 0 || val > 59 || end > 59) && val != allSpec {
			fail(0, "%s values must be between 0 and 59", fieldNames[typ])
		}
	case fHour:
		if (val < 0 || val > 23 || end > 23) && val != allSpec {
			fail(0, "hour values must be between 0 and 23")
		}
	case fDayOfMonth:
		if (val < 1 || val > 31 || end > 31) && val != allSpec && val != noSpec {
			fail(0, "day-of-month values must be between 1 and 31")
		}
	case fMonth:
		if (val < 1 || val > 12 || end > 12) && val != allSpec {
			fail(0, "month values must be between 1 and 12 (or JAN-DEC)")
		}
	case fDayOfWeek:
		if (val == 0 || val > 7 || end > 7) && val != allSpec && val != noSpec {
			fail(0, "day-of-week values must be between 1 and 7 (or SUN-SAT)")
		}
	}
	if (incr == 0 || incr == -1) && val != allSpec {
		if typ == fYear && val > maxStoredYear {
			val = maxStoredYear + 1 // never reached: every year past the give-up year is alike
		}
		if val != -1 {
			p.add(typ, val)
		} else {
			p.add(typ, noSpec)
		}
		return
	}
	startAt, stopAt := val, end
	if val == allSpec && incr <= 0 {
		incr = 1
		p.add(typ, allSpec)
	}
	lo, hi := 0, 0
	switch typ {
	case fSecond, fMinute:
		lo, hi = 0, 59
	case fHour:
		lo, hi = 0, 23
	case fDayOfMonth:
		lo, hi = 1, 31
	case fMonth:
		lo, hi = 1, 12
	case fDayOfWeek:
		lo, hi = 1, 7
	case fYear:
		lo, hi = 1970, maxYear
	}
	if stopAt == -1 {
		stopAt = hi
	}
	if startAt == -1 || startAt == allSpec {
		startAt = lo
	}
	mod := -1
	if stopAt < startAt {
		switch typ {
		case fSecond, fMinute:
			mod = 60
		case fHour:
			mod = 24
		case fMonth:
			mod = 12
		case fDayOfWeek:
			mod = 7
		case fDayOfMonth:
			mod = 31
		case fYear:
			fail(0, "start year %d must not be after end year %d", startAt, stopAt)
		}
		stopAt += mod
	}
	for i := startAt; i <= stopAt; i += incr {
		if typ == fYear && i > maxStoredYear {
			break
		}
		if mod == -1 {
			p.add(typ, i)
			continue
		}
		i2 := i % mod
		if i2 == 0 && (typ == fMonth || typ == fDayOfWeek || typ == fDayOfMonth) {
			i2 = mod
		}
		p.add(typ, i2)
	}
}

func sortedKeys(m map[int]bool) []int {
	out := make([]int, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}
