// GenParse feeds random cron-like strings to the real Quartz 2.3.2 parser and records whether
// it accepts them and, if so, the next three fire times (UTC, from 2026-01-01T00:00:00Z), or
// that evaluating them threw or did not finish within a second. Output: cron-parse.jsonl.
//
//	javac -cp /usr/share/java/quartz2.jar -d /tmp/gen GenParse.java
//	java -cp /usr/share/java/quartz2.jar:/tmp/gen GenParse > cron-parse.jsonl
import java.util.*;
import java.util.concurrent.*;
import java.time.Instant;
import org.quartz.CronExpression;

public class GenParse {
    static Random r = new Random(7);
    static final String[] ATOMS = {"0", "1", "5", "7", "12", "15", "23", "30", "31", "59", "60", "2026", "*", "?", "L", "W", "#", "/", "-", ",",
        "MON", "FRI", "SUN", "JAN", "DEC", "LW", "L-3", "5L", "2#3", "15W", "0W", "*/5", "0/15", "3-59/5", "MON-FRI", "JAN-MAR", "X", "mon", "LL", "+1"};

    static String token() {
        int k = 1 + r.nextInt(3);
        StringBuilder b = new StringBuilder();
        for (int i = 0; i < k; i++) b.append(ATOMS[r.nextInt(ATOMS.length)]);
        return b.toString();
    }

    static String esc(String s) { return s.replace("\\", "\\\\").replace("\"", "\\\""); }

    public static void main(String[] a) throws Exception {
        TimeZone.setDefault(TimeZone.getTimeZone("UTC"));
        ExecutorService ex = Executors.newCachedThreadPool(rt -> { Thread t = new Thread(rt); t.setDaemon(true); return t; });
        Set<String> seen = new HashSet<>();
        int accepted = 0, rejected = 0;
        while (accepted < 1500 || rejected < 1500) {
            int nf = 6 + (r.nextInt(5) == 0 ? 1 : 0);
            String[] f = new String[nf];
            // Keep most fields plain so that the interesting one decides.
            for (int i = 0; i < nf; i++) f[i] = new String[]{"0", "0", "0", "*", "*", "?", "*"}[i];
            if (r.nextBoolean()) { f[3] = "?"; f[5] = "*"; }
            int changes = 1 + r.nextInt(2);
            for (int c = 0; c < changes; c++) f[r.nextInt(nf)] = token();
            String e = String.join(" ", f);
            if (!seen.add(e)) continue;
            final CronExpression ce;
            try {
                ce = new CronExpression(e);
            } catch (Exception pe) {
                if (rejected >= 1500) continue;
                rejected++;
                System.out.println("{\"expr\":\"" + esc(e) + "\",\"accepted\":false}");
                continue;
            }
            if (accepted >= 1500) continue;
            accepted++;
            ce.setTimeZone(TimeZone.getTimeZone("UTC"));
            Future<String> fu = ex.submit(() -> {
                StringBuilder b = new StringBuilder();
                Date at = Date.from(Instant.parse("2026-01-01T00:00:00Z"));
                for (int i = 0; i < 3; i++) {
                    Date nx = ce.getNextValidTimeAfter(at);
                    if (nx == null) break;
                    if (b.length() > 0) b.append(",");
                    b.append("\"").append(Instant.ofEpochMilli(nx.getTime())).append("\"");
                    at = nx;
                }
                return b.toString();
            });
            String out;
            try {
                out = "\"next\":[" + fu.get(1, TimeUnit.SECONDS) + "]";
            } catch (TimeoutException te) {
                fu.cancel(true);
                out = "\"eval\":\"timeout\"";
            } catch (ExecutionException ee) {
                out = "\"eval\":\"" + esc(ee.getCause().getClass().getSimpleName()) + "\"";
            }
            System.out.println("{\"expr\":\"" + esc(e) + "\",\"accepted\":true," + out + "}");
        }
        System.exit(0);
    }
}
