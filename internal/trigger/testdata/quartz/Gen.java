// Gen computes reference fire times with the real Quartz 2.3.2 for the trigger kinds and
// calendars that the reference vectors in ../vectors do not cover (calendar-interval,
// daily-time-interval, calendars on cron and simple triggers). It is not part of the build; the tests read its
// output, quartz-extra.jsonl. To regenerate (Debian: apt-get install libquartz2-java):
//
//	javac -cp /usr/share/java/quartz2.jar -d /tmp/gen Gen.java
//	java -cp /usr/share/java/quartz2.jar:/usr/share/java/slf4j-api.jar:/usr/share/java/slf4j-nop.jar:/tmp/gen Gen > quartz-extra.jsonl
import java.util.*;
import java.util.Calendar;
import java.time.Instant;
import org.quartz.*;
import org.quartz.impl.triggers.*;
import org.quartz.impl.calendar.*;
import org.quartz.spi.OperableTrigger;

public class Gen {
    static final String[] ZONES = {"UTC", "America/New_York", "Europe/London", "Australia/Lord_Howe", "Asia/Kolkata"};

    static String t(Date d) { return d == null ? "null" : "\"" + Instant.ofEpochMilli(d.getTime()) + "\""; }

    static Date local(String zone, int y, int mo, int d, int h, int mi, int s) {
        Calendar c = Calendar.getInstance(TimeZone.getTimeZone(zone));
        c.clear();
        c.set(y, mo - 1, d, h, mi, s);
        return c.getTime();
    }

    static String fires(OperableTrigger tr, org.quartz.Calendar cal, int n) {
        StringBuilder b = new StringBuilder("[");
        Date first = tr.computeFirstFireTime(cal);
        tr.setNextFireTime(first);
        for (int i = 0; i < n && tr.getNextFireTime() != null; i++) {
            if (i > 0) b.append(",");
            b.append(t(tr.getNextFireTime()));
            tr.triggered(cal);
        }
        return b.append("]").toString();
    }

    static String q(String s) { return "\"" + s + "\""; }

    public static void main(String[] a) throws Exception {
        TimeZone.setDefault(TimeZone.getTimeZone("UTC"));
        calendarInterval();
        dailyTimeInterval();
        calendars();
    }

    static void calendarInterval() {
        String[][] units = {{"SECOND", "7"}, {"MINUTE", "90"}, {"HOUR", "5"}, {"DAY", "1"}, {"DAY", "3"}, {"WEEK", "2"}, {"MONTH", "1"}, {"MONTH", "5"}, {"YEAR", "1"}};
        int[][] starts = {{2026, 3, 7, 2, 30, 0}, {2026, 10, 24, 1, 30, 0}, {2026, 1, 31, 10, 0, 0}, {2026, 4, 4, 1, 45, 0}, {2026, 10, 3, 2, 15, 0}, {2026, 3, 28, 1, 30, 0}, {2028, 2, 29, 23, 59, 59}};
        for (String zone : ZONES) for (String[] u : units) for (int[] s : starts) for (int opt = 0; opt < 3; opt++) for (int withEnd = 0; withEnd < 2; withEnd++) {
            CalendarIntervalTriggerImpl tr = new CalendarIntervalTriggerImpl();
            Date start = local(zone, s[0], s[1], s[2], s[3], s[4], s[5]);
            tr.setStartTime(start);
            Date end = null;
            if (withEnd == 1) {
                end = new Date(start.getTime() + 40L * 24 * 3600 * 1000 + 1234);
                tr.setEndTime(end);
            }
            tr.setRepeatIntervalUnit(DateBuilder.IntervalUnit.valueOf(u[0]));
            tr.setRepeatInterval(Integer.parseInt(u[1]));
            tr.setTimeZone(TimeZone.getTimeZone(zone));
            tr.setPreserveHourOfDayAcrossDaylightSavings(opt >= 1);
            tr.setSkipDayIfHourDoesNotExist(opt == 2);
            String def = "{\"calendarInterval\":{\"interval\":" + u[1] + ",\"unit\":" + q(u[0].toLowerCase()) + ",\"timeZone\":" + q(zone)
                + ",\"preserveHourOfDayAcrossDaylightSavings\":" + (opt >= 1) + ",\"skipDayIfHourDoesNotExist\":" + (opt == 2) + "},\"startAt\":" + t(start)
                + (end != null ? ",\"endAt\":" + t(end) : "") + "}";
            String f = fires(tr, null, 6);
            System.out.println("{\"def\":" + def + ",\"calendar\":null,\"fires\":" + f + ",\"final\":" + t(tr.getFinalFireTime()) + "}");
        }
    }

    static void dailyTimeInterval() {
        String[][] windows = {{"09:00:00", "17:00:00"}, {"00:00:00", "23:59:59"}, {"01:30:00", "03:15:00"}, {"22:00:00", "23:30:00"}, {"08:00:00", "08:00:00"}};
        String[][] units = {{"SECOND", "45"}, {"MINUTE", "25"}, {"HOUR", "2"}, {"MINUTE", "90"}};
        int[][] dayss = {{1, 2, 3, 4, 5, 6, 7}, {2, 3, 4, 5, 6}, {1, 7}, {4}};
        int[][] starts = {{2026, 3, 6, 12, 0, 0}, {2026, 10, 23, 12, 0, 0}, {2026, 4, 3, 0, 0, 0}, {2026, 11, 20, 16, 59, 30}};
        int[] repeats = {-1, 3};
        for (String zone : ZONES) for (String[] w : windows) for (String[] u : units) for (int[] days : dayss) for (int[] s : starts) for (int rc : repeats) {
            TimeZone.setDefault(TimeZone.getTimeZone(zone)); // Quartz 2.3.2 evaluates these in the JVM's zone
            DailyTimeIntervalTriggerImpl tr = new DailyTimeIntervalTriggerImpl();
            Date start = local(zone, s[0], s[1], s[2], s[3], s[4], s[5]);
            tr.setStartTime(start);
            String[] st = w[0].split(":"), en = w[1].split(":");
            tr.setStartTimeOfDay(new TimeOfDay(Integer.parseInt(st[0]), Integer.parseInt(st[1]), Integer.parseInt(st[2])));
            tr.setEndTimeOfDay(new TimeOfDay(Integer.parseInt(en[0]), Integer.parseInt(en[1]), Integer.parseInt(en[2])));
            Set<Integer> ds = new HashSet<>();
            StringBuilder dj = new StringBuilder("[");
            for (int i = 0; i < days.length; i++) { ds.add(days[i]); if (i > 0) dj.append(","); dj.append(days[i]); }
            dj.append("]");
            tr.setDaysOfWeek(ds);
            tr.setRepeatIntervalUnit(DateBuilder.IntervalUnit.valueOf(u[0]));
            tr.setRepeatInterval(Integer.parseInt(u[1]));
            tr.setRepeatCount(rc);
            String def = "{\"dailyTimeInterval\":{\"startTimeOfDay\":" + q(w[0]) + ",\"endTimeOfDay\":" + q(w[1]) + ",\"daysOfWeek\":" + dj
                + ",\"interval\":" + u[1] + ",\"unit\":" + q(u[0].toLowerCase()) + ",\"repeatCount\":" + rc + ",\"timeZone\":" + q(zone) + "},\"startAt\":" + t(start) + "}";
            String f = fires(tr, null, 8);
            System.out.println("{\"def\":" + def + ",\"calendar\":null,\"fires\":" + f + "}");
        }
        TimeZone.setDefault(TimeZone.getTimeZone("UTC"));
    }

    static void calendars() throws Exception {
        for (String zone : ZONES) {
            TimeZone tz = TimeZone.getTimeZone(zone);
            List<String[]> cals = new ArrayList<>();
            List<org.quartz.Calendar> objs = new ArrayList<>();

            // new WeeklyCalendar(tz) excludes nothing (only the no-argument and (base, tz)
            // constructors exclude SAT and SUN), so the days are set explicitly.
            WeeklyCalendar wk = new WeeklyCalendar(tz);
            wk.setDayExcluded(Calendar.SATURDAY, true); wk.setDayExcluded(Calendar.SUNDAY, true);
            objs.add(wk); cals.add(new String[]{"{\"type\":\"weekly\",\"days\":[\"SAT\",\"SUN\"],\"timeZone\":" + q(zone) + "}"});

            WeeklyCalendar wk2 = new WeeklyCalendar(tz);
            wk2.setDayExcluded(Calendar.SATURDAY, false); wk2.setDayExcluded(Calendar.SUNDAY, false);
            wk2.setDayExcluded(Calendar.WEDNESDAY, true);
            objs.add(wk2); cals.add(new String[]{"{\"type\":\"weekly\",\"days\":[\"WED\"],\"timeZone\":" + q(zone) + "}"});

            HolidayCalendar hol = new HolidayCalendar(tz);
            hol.addExcludedDate(local(zone, 2026, 3, 9, 12, 0, 0));
            hol.addExcludedDate(local(zone, 2026, 3, 10, 12, 0, 0));
            hol.addExcludedDate(local(zone, 2026, 12, 25, 12, 0, 0));
            objs.add(hol); cals.add(new String[]{"{\"type\":\"holiday\",\"dates\":[\"2026-03-09\",\"2026-03-10\",\"2026-12-25\"],\"timeZone\":" + q(zone) + "}"});

            AnnualCalendar ann = new AnnualCalendar(tz);
            for (int[] md : new int[][]{{3, 9}, {3, 11}, {12, 25}}) {
                Calendar d = Calendar.getInstance(tz); d.clear(); d.set(2000, md[0] - 1, md[1]);
                ann.setDayExcluded(d, true);
            }
            objs.add(ann); cals.add(new String[]{"{\"type\":\"annual\",\"days\":[\"03-09\",\"03-11\",\"12-25\"],\"timeZone\":" + q(zone) + "}"});

            MonthlyCalendar mon = new MonthlyCalendar(tz);
            mon.setDayExcluded(9, true); mon.setDayExcluded(10, true); mon.setDayExcluded(31, true);
            objs.add(mon); cals.add(new String[]{"{\"type\":\"monthly\",\"days\":[9,10,31],\"timeZone\":" + q(zone) + "}"});

            DailyCalendar dc = new DailyCalendar("08:00", "17:29:59:500");
            dc.setTimeZone(tz);
            objs.add(dc); cals.add(new String[]{"{\"type\":\"daily\",\"start\":\"08:00\",\"end\":\"17:29:59.500\",\"timeZone\":" + q(zone) + "}"});

            DailyCalendar dci = new DailyCalendar("01:00:00", "03:45:00");
            dci.setTimeZone(tz); dci.setInvertTimeRange(true);
            objs.add(dci); cals.add(new String[]{"{\"type\":\"daily\",\"start\":\"01:00:00\",\"end\":\"03:45:00\",\"invert\":true,\"timeZone\":" + q(zone) + "}"});

            CronCalendar cc = new CronCalendar("* * 0-6,20-23 ? * *");
            cc.setTimeZone(tz);
            objs.add(cc); cals.add(new String[]{"{\"type\":\"cron\",\"expression\":\"* * 0-6,20-23 ? * *\",\"timeZone\":" + q(zone) + "}"});

            // Chained: holidays on top of weekends.
            WeeklyCalendar base = new WeeklyCalendar(tz);
            base.setDayExcluded(Calendar.SATURDAY, true); base.setDayExcluded(Calendar.SUNDAY, true);
            HolidayCalendar chained = new HolidayCalendar(base, tz);
            chained.addExcludedDate(local(zone, 2026, 3, 9, 12, 0, 0));
            objs.add(chained); cals.add(new String[]{"{\"type\":\"holiday\",\"dates\":[\"2026-03-09\"],\"timeZone\":" + q(zone) + ",\"base\":{\"type\":\"weekly\",\"timeZone\":" + q(zone) + "}}"});

            String[] crons = {"0 15/30 * * * ?", "0 0 12 * * ?", "0 45 2 ? * *"};
            int[][] starts = {{2026, 3, 6, 12, 0, 0}, {2026, 12, 24, 0, 0, 0}, {2026, 10, 23, 23, 0, 0}};
            for (int i = 0; i < objs.size(); i++) {
                for (String ce : crons) for (int[] s : starts) {
                    CronTriggerImpl tr = new CronTriggerImpl();
                    tr.setCronExpression(ce);
                    tr.setTimeZone(tz);
                    Date start = local(zone, s[0], s[1], s[2], s[3], s[4], s[5]);
                    tr.setStartTime(start);
                    String def = "{\"cron\":{\"expression\":" + q(ce) + ",\"timeZone\":" + q(zone) + "},\"startAt\":" + t(start) + "}";
                    System.out.println("{\"def\":" + def + ",\"calendar\":" + cals.get(i)[0] + ",\"fires\":" + fires(tr, objs.get(i), 8) + "}");
                }
                for (int[] s : starts) {
                    SimpleTriggerImpl tr = new SimpleTriggerImpl();
                    Date start = local(zone, s[0], s[1], s[2], s[3], s[4], s[5]);
                    tr.setStartTime(start);
                    tr.setRepeatInterval(7L * 3600 * 1000 + 250);
                    tr.setRepeatCount(20);
                    String def = "{\"simple\":{\"interval\":\"7h0m0.25s\",\"repeatCount\":20},\"startAt\":" + t(start) + "}";
                    System.out.println("{\"def\":" + def + ",\"calendar\":" + cals.get(i)[0] + ",\"fires\":" + fires(tr, objs.get(i), 8) + "}");
                }
            }
        }
    }
}
