// GenCron computes next fire times of random Quartz cron expressions with the real Quartz
// 2.3.2, in zones and years the reference vectors in ../vectors do not cover (negative and
// half-hour DST, midnight transitions, dates past 2037 where the JDK switches to its last zone
// rule). Output: cron-extra.jsonl, in the format of ../vectors/cron-valid.jsonl. To regenerate:
//
//	javac -cp /usr/share/java/quartz2.jar -d /tmp/gen GenCron.java
//	java -cp /usr/share/java/quartz2.jar:/tmp/gen GenCron > cron-extra.jsonl
import java.util.*;
import java.time.*;
import java.time.format.DateTimeFormatter;
import org.quartz.CronExpression;

public class GenCron {
    static final String[] ZONES = {"America/Santiago", "America/Havana", "Europe/Dublin", "Pacific/Chatham", "America/St_Johns",
        "Asia/Tehran", "Africa/Casablanca", "America/New_York", "Australia/Lord_Howe", "Europe/London", "UTC"};
    static Random r = new Random(20261122);

    static int n(int lo, int hi) { return lo + r.nextInt(hi - lo + 1); }

    static String field(int lo, int hi, String[] names) {
        switch (r.nextInt(9)) {
            case 0: return "*";
            case 1: return "" + n(lo, hi);
            case 2: return n(lo, hi) + "-" + n(lo, hi);
            case 3: return n(lo, hi) + "/" + n(1, Math.max(1, (hi - lo) / 2));
            case 4: return n(lo, hi) + "," + n(lo, hi) + "," + n(lo, hi);
            case 5: return "*/" + n(1, Math.max(1, (hi - lo) / 2));
            case 6: return n(lo, hi) + "-" + n(lo, hi) + "/" + n(1, 5);
            case 7: if (names != null) return names[n(0, names.length - 1)] + "-" + names[n(0, names.length - 1)];
                    return "" + lo;
            default: return "" + n(lo, hi) + "," + n(lo, hi) + "-" + n(lo, hi);
        }
    }

    static final String[] MONTHS = {"JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT", "NOV", "DEC"};
    static final String[] DAYS = {"SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT"};

    static String expr() {
        String sec = r.nextInt(3) == 0 ? field(0, 59, null) : "0";
        String min = r.nextInt(3) == 0 ? field(0, 59, null) : new String[]{"0", "30", "*/15", "0/20", "15,45"}[n(0, 4)];
        String hour = r.nextInt(2) == 0 ? field(0, 23, null) : new String[]{"0", "1", "2", "3", "0-3", "23", "*/2", "1-4/3"}[n(0, 7)];
        String dom, dow;
        if (r.nextBoolean()) {
            dom = new String[]{field(1, 31, null), "L", "LW", n(1, 31) + "W", "L-" + n(0, 27), "L-" + n(0, 27) + "W", "?"}[n(0, 5)];
            dow = "?";
        } else {
            dom = "?";
            dow = new String[]{field(1, 7, DAYS), "MON-FRI", n(1, 7) + "L", n(1, 7) + "#" + n(1, 5), DAYS[n(0, 6)] + "#" + n(1, 5), "SAT,SUN"}[n(0, 5)];
        }
        String month = r.nextInt(2) == 0 ? "*" : field(1, 12, MONTHS);
        String e = sec + " " + min + " " + hour + " " + dom + " " + month + " " + dow;
        if (r.nextInt(6) == 0) e += " " + new String[]{"2026-2045", "*/3", "2040", "2030,2050,2070"}[n(0, 3)];
        return e;
    }

    static String fmt(Date d, ZoneId z) {
        ZonedDateTime t = Instant.ofEpochMilli(d.getTime()).atZone(z);
        String s = t.format(DateTimeFormatter.ISO_OFFSET_DATE_TIME);
        return s;
    }

    public static void main(String[] a) throws Exception {
        int count = 0;
        while (count < 3000) {
            String e = expr();
            CronExpression ce;
            try {
                ce = new CronExpression(e);
            } catch (Exception ex) {
                continue;
            }
            String zone = ZONES[n(0, ZONES.length - 1)];
            ce.setTimeZone(TimeZone.getTimeZone(zone));
            ZoneId z = ZoneId.of(zone);
            // Mostly near DST changes: pick a year, then a day in March/April or Sep-Nov, or anywhere.
            int year = r.nextInt(4) == 0 ? n(2038, 2060) : n(2026, 2037);
            int month = new int[]{3, 4, 9, 10, 11, n(1, 12)}[n(0, 5)];
            ZonedDateTime from = ZonedDateTime.of(year, month, n(1, 28), n(0, 23), n(0, 59), n(0, 59), 0, z);
            Date at = Date.from(from.toInstant());
            StringBuilder b = new StringBuilder();
            boolean failed = false;
            try {
                for (int i = 0; i < 5; i++) {
                    Date nx = ce.getNextValidTimeAfter(at);
                    if (nx == null) break;
                    if (b.length() > 0) b.append(",");
                    b.append("\"").append(fmt(nx, z)).append("\"");
                    at = nx;
                }
            } catch (Exception ex) {
                failed = true;
            }
            if (failed) continue;
            System.out.println("{\"expr\":\"" + e + "\",\"tz\":\"" + zone + "\",\"from\":\"" + fmt(Date.from(from.toInstant()), z) + "\",\"next\":[" + b + "]}");
            count++;
        }
    }
}
