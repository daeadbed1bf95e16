// Package trigger computes when triggers fire, with Quartz 2.3.2's semantics, as pure functions
// of their definition, their state and the clock value the caller passes in: no I/O, no
// goroutines, no reading of the system clock in the computations.
//
// # Trigger kinds
//
//   - Cron: a Quartz cron expression (seconds, minutes, hours, day-of-month, month,
//     day-of-week, optional year; '?', 'L', 'W', 'LW', '#', names) evaluated in an IANA zone.
//     A fire time in a spring-forward gap is skipped; in a fall-back overlap only the second
//     occurrence fires — both as Quartz does, because its arithmetic is reproduced on an
//     emulation of java.util.GregorianCalendar (see jcal.go).
//   - Simple: start, then every interval, repeatCount more times (-1: for ever).
//   - CalendarInterval: every n seconds … years of calendar time in a zone.
//   - DailyTimeInterval: every n seconds/minutes/hours within a daily window, on some days of
//     the week.
//
// All kinds honour start and end times and an optional Calendar (exclusions, chainable through
// a base calendar), and every Quartz misfire instruction of their kind.
//
// # Where this package sits in the Quartz state machine
//
// The store keeps Quartz's states; this package only moves the times and counters on which the
// transitions depend:
//
//	                 acquire (next fire due)           fire: Triggered(cal)
//	  ┌─────────┐  ─────────────────────────▶  ┌──────────┐  next != 0, job concurrent   ┌─────────┐
//	  │ WAITING │                              │ ACQUIRED │ ─────────────────────────▶  │ WAITING │
//	  └─────────┘  ◀── release (node died) ──  └──────────┘                             └─────────┘
//	     │  ▲                                     │   │ next != 0, job nonconcurrent: BLOCKED until the
//	pause│  │resume                             next == 0 ▼      job completes, then WAITING again
//	     ▼  │                                 ┌──────────┐
//	  ┌────────┐   (PAUSED_BLOCKED while the  │ COMPLETE │   ERROR: the trigger cannot be computed
//	  │ PAUSED │    job runs, then PAUSED)    └──────────┘   (e.g. its stored definition no longer
//	  └────────┘                                              validates); it is not fired again.
//
// Fired-trigger rows go ACQUIRED (claimed by a node) → EXECUTING (fired; the job runs) and are
// deleted when the job completes.
//
// # Checked against Quartz
//
// The tests compare with fire times computed by the real Quartz 2.3.2: the Quartz reference
// vectors in testdata/vectors (cron, misfires; its README says how they were computed) and
// testdata/quartz (calendar-interval, daily-time-interval, calendars, random cron expressions
// in more zones, parser acceptance), whose generators are there too.
//
// # Deliberate differences from Quartz 2.3.2
//
//   - Expressions Quartz accepts but cannot evaluate are rejected by ParseCron with a message:
//     'L' (or nothing) in the seconds, minutes, hours or month field (Quartz throws at the first
//     evaluation), day 0 with 'W' and 'L-nW' with n ≥ 28 (Quartz never returns).
//   - Every search is bounded; where Quartz would loop for ever or for hours, the trigger gets
//     no next fire time instead.
//   - "nW"/"LW" compare with the search start to the second: Quartz compares with a calendar
//     whose milliseconds are the wall clock's, so its answer can depend on the clock.
//   - Quartz's cron give-up year (MAX_YEAR, the class-loading year + 100) is at least 2126.
//   - A DailyCalendar that is not inverted excludes exactly its range; Quartz's also excludes
//     00:00:00.000 and 23:59:59.999 of every day (an off-by-one that stops midnight triggers).
//   - A daily-time-interval trigger never fires after its end time (Quartz checks the end time
//     before adding the interval) and evaluates in its schedule's time zone (Quartz 2.3.2 uses
//     the JVM's default zone).
//   - Zone rules come from Go's tz database; the JDK keeps transitions only up to 2037 and then
//     repeats each zone's last rule, so zones without one (Africa/Casablanca) differ after 2037.
//
// The misfire scan (the caller's, with its threshold) calls UpdateAfterMisfire on WAITING
// triggers whose NextFireTime is older than now - threshold, unless IgnoresMisfires; the
// acquire step then fires them at their (new) NextFireTime.
package trigger
