package agatebench;

import java.io.BufferedReader;
import java.io.BufferedWriter;
import java.io.IOException;
import java.io.InputStream;
import java.io.InputStreamReader;
import java.io.OutputStream;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.time.Instant;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Date;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Locale;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.concurrent.ConcurrentLinkedQueue;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

import org.quartz.Job;
import org.quartz.JobDetail;
import org.quartz.JobExecutionContext;
import org.quartz.Scheduler;
import org.quartz.SimpleScheduleBuilder;
import org.quartz.Trigger;
import org.quartz.core.QuartzScheduler;
import org.quartz.impl.StdSchedulerFactory;

import static org.quartz.JobBuilder.newJob;
import static org.quartz.TriggerBuilder.newTrigger;

/**
 * The burst workload on clustered Quartz. {@code --mode driver} (the default) creates Quartz's
 * tables, schedules the jobs and their triggers, starts {@code --nodes} scheduler JVMs
 * ({@code --mode node}), moves every trigger to T0 = now + {@code --lead-ms}, waits until every
 * one has completed and prints the figures; a node runs one clustered scheduler until its
 * standard input closes, then writes its records.
 *
 * <p>The database user and password come from QUARTZ_DB_USER and QUARTZ_DB_PASSWORD, so that
 * they are not on any command line. Lines starting with @ on standard error mark the moments
 * agatebench samples CPU time at: "@pids P…" (driver and nodes), "@t0 UNIXMS" and "@done".
 */
public final class Burst {
    static final String SCHED = "AgateBenchBurst";
    static final String GROUP = "burst";
    /** Triggers (with their jobs) per scheduleJobs call, one transaction each. */
    static final int LOAD_BATCH = 500;

    /** Held so that its level stays set: c3p0 logs its configuration at INFO through java.util.logging. */
    static final java.util.logging.Logger C3P0_LOG = java.util.logging.Logger.getLogger("com.mchange");

    public static void main(String[] args) throws Exception {
        // Quartz logs through slf4j-simple: warnings and errors only, on standard error.
        System.setProperty("org.slf4j.simpleLogger.defaultLogLevel", "warn");
        C3P0_LOG.setLevel(java.util.logging.Level.WARNING);
        Map<String, String> a = flags(args);
        String url = a.get("jdbc-url");
        if (url == null) {
            fail("--jdbc-url is required");
        }
        try {
            if ("node".equals(a.getOrDefault("mode", "driver"))) {
                node(url, a.get("label"), Paths.get(a.get("out")));
            } else {
                driver(url, intFlag(a, "n", 20000), intFlag(a, "nodes", 2), intFlag(a, "lead-ms", 5000),
                        intFlag(a, "timeout-ms", 300000));
            }
        } catch (Exception e) {
            e.printStackTrace();
            fail(e.toString());
        }
    }

    /** The configuration of every scheduler, nodes and the driver's loader alike. */
    static Properties quartz(String url, String instanceId, int threads) {
        Properties p = new Properties();
        p.setProperty("org.quartz.scheduler.instanceName", SCHED);
        p.setProperty("org.quartz.scheduler.instanceId", instanceId);
        p.setProperty("org.quartz.scheduler.skipUpdateCheck", "true");
        // 1000 ms is the smallest Quartz accepts; the default is 30 s.
        p.setProperty("org.quartz.scheduler.idleWaitTime", "1000");
        p.setProperty("org.quartz.scheduler.batchTriggerAcquisitionMaxCount", "50");
        p.setProperty("org.quartz.threadPool.class", "org.quartz.simpl.SimpleThreadPool");
        p.setProperty("org.quartz.threadPool.threadCount", String.valueOf(threads));
        p.setProperty("org.quartz.jobStore.class", "org.quartz.impl.jdbcjobstore.JobStoreTX");
        p.setProperty("org.quartz.jobStore.driverDelegateClass", "org.quartz.impl.jdbcjobstore.PostgreSQLDelegate");
        p.setProperty("org.quartz.jobStore.tablePrefix", "QRTZ_");
        p.setProperty("org.quartz.jobStore.isClustered", "true");
        p.setProperty("org.quartz.jobStore.clusterCheckinInterval", "1000");
        // Batched acquisition is only safe in a cluster when it happens under the lock.
        p.setProperty("org.quartz.jobStore.acquireTriggersWithinLock", "true");
        p.setProperty("org.quartz.jobStore.dataSource", "db");
        p.setProperty("org.quartz.dataSource.db.driver", "org.postgresql.Driver");
        p.setProperty("org.quartz.dataSource.db.URL", url);
        p.setProperty("org.quartz.dataSource.db.user", env("QUARTZ_DB_USER", "postgres"));
        p.setProperty("org.quartz.dataSource.db.password", env("QUARTZ_DB_PASSWORD", ""));
        // Quartz's advice: the worker threads plus a few for the scheduler's own work.
        p.setProperty("org.quartz.dataSource.db.maxConnections", String.valueOf(threads + 3));
        return p;
    }

    static String version() {
        return QuartzScheduler.getVersionMajor() + "." + QuartzScheduler.getVersionMinor() + "."
                + QuartzScheduler.getVersionIteration();
    }

    // ------------------------------------------------------------------ node

    /** The no-op job: it records its trigger's number, scheduled fire time (ms) and start and end (µs). */
    public static final class NoopJob implements Job {
        static final ConcurrentLinkedQueue<long[]> RECORDS = new ConcurrentLinkedQueue<>();

        @Override
        public void execute(JobExecutionContext ctx) {
            long start = micros();
            long i = Long.parseLong(ctx.getTrigger().getKey().getName().substring(1));
            long scheduled = ctx.getScheduledFireTime().getTime();
            RECORDS.add(new long[] {i, scheduled, start, micros()});
        }
    }

    static void node(String url, String label, Path out) throws Exception {
        Scheduler s = new StdSchedulerFactory(quartz(url, label, 10)).getScheduler();
        s.start();
        System.out.println("READY");
        System.out.flush();
        InputStream in = System.in;
        while (in.read() != -1) {
            // The driver closes our standard input to stop us (or dies).
        }
        s.shutdown(true);
        try (BufferedWriter w = Files.newBufferedWriter(out)) {
            for (long[] r : NoopJob.RECORDS) {
                w.write(r[0] + " " + r[1] + " " + r[2] + " " + r[3] + "\n");
            }
        }
        System.exit(0);
    }

    // ------------------------------------------------------------------ driver

    static void driver(String url, int n, int nodes, long leadMs, long timeoutMs) throws Exception {
        if (n <= 0 || nodes <= 0 || leadMs <= 0 || timeoutMs <= 0) {
            fail("--n, --nodes, --lead-ms and --timeout-ms must be positive");
        }
        createTables(url);
        // Quartz's API stores a few hundred triggers a second here, and the nodes' acquisition
        // waits on the same lock meanwhile: the load is not what the burst measures (agatebench's
        // intake workload is). So the triggers are scheduled through the API before the nodes
        // start, due in a day, and moved to T0 once the cluster runs by one UPDATE of the two
        // columns Quartz reads a one-shot trigger's time from, as if they had been scheduled for T0.
        long placeholder = System.currentTimeMillis() + TimeUnit.DAYS.toMillis(1);
        long loadMs = load(url, n, placeholder);

        Path dir = Files.createTempDirectory("agatebench-quartz-");
        List<Process> procs = new ArrayList<>();
        Runtime.getRuntime().addShutdownHook(new Thread(() -> procs.forEach(Process::destroyForcibly)));
        CountDownLatch ready = new CountDownLatch(nodes);
        String java = Paths.get(System.getProperty("java.home"), "bin", "java").toString();
        for (int k = 1; k <= nodes; k++) {
            Process p = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"),
                    "agatebench.Burst", "--mode", "node",
                    "--jdbc-url", url, "--label", "n" + k, "--out", dir.resolve("n" + k + ".rec").toString())
                    .redirectError(ProcessBuilder.Redirect.INHERIT).start();
            procs.add(p);
            Thread t = new Thread(() -> {
                try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8))) {
                    for (String line; (line = r.readLine()) != null; ) {
                        if (line.equals("READY")) {
                            ready.countDown();
                        }
                    }
                } catch (IOException ignored) {
                    // The node is gone; the wait below notices.
                }
            });
            t.setDaemon(true);
            t.start();
        }
        if (!ready.await(120, TimeUnit.SECONDS)) {
            fail((nodes - ready.getCount()) + " of " + nodes + " Quartz nodes ready after 120 s");
        }
        // Let every node check in once, so that the cluster is whole before anything is due.
        Thread.sleep(2000);
        StringBuilder pids = new StringBuilder("@pids " + ProcessHandle.current().pid());
        procs.forEach(p -> pids.append(' ').append(p.pid()));
        System.err.println(pids);

        long moveStart = System.currentTimeMillis();
        long t0 = moveStart + leadMs;
        System.err.println("@t0 " + t0);
        try (Connection c = db(url); Statement st = c.createStatement()) {
            try (PreparedStatement ps = c.prepareStatement(
                    "update qrtz_triggers set start_time = ?, next_fire_time = ? where sched_name = ? and trigger_group = ?")) {
                ps.setLong(1, t0);
                ps.setLong(2, t0);
                ps.setString(3, SCHED);
                ps.setString(4, GROUP);
                int moved = ps.executeUpdate();
                if (moved != n) {
                    fail(moved + " of " + n + " triggers found to move to T0");
                }
            }
            // Fresh statistics for the acquisition queries, as a table in use has.
            st.execute("ANALYZE");
        }
        if (System.currentTimeMillis() > t0) {
            fail("moving " + n + " triggers to T0 and ANALYZE took " + (System.currentTimeMillis() - moveStart)
                    + " ms, past T0: raise --lead-ms");
        }

        // Completed: the trigger (one-shot) and its fired row are deleted. EXISTS rather than a
        // count, so that polling every 10 ms for minutes costs the database next to nothing.
        boolean timedOut = false;
        try (Connection c = db(url); PreparedStatement ps = c.prepareStatement(
                "select exists (select 1 from qrtz_triggers where sched_name = ?)"
                        + " or exists (select 1 from qrtz_fired_triggers where sched_name = ?)")) {
            ps.setString(1, SCHED);
            ps.setString(2, SCHED);
            while (true) {
                boolean left;
                try (ResultSet rs = ps.executeQuery()) {
                    rs.next();
                    left = rs.getBoolean(1);
                }
                if (!left) {
                    break;
                }
                if (System.currentTimeMillis() > t0 + timeoutMs) {
                    timedOut = true;
                    break;
                }
                Thread.sleep(10);
            }
        }
        long doneAt = System.currentTimeMillis();
        System.err.println("@done");
        if (timedOut) {
            System.err.println("quartz burst: not every trigger completed " + timeoutMs + " ms after T0");
        }

        // Stop the nodes and collect their records.
        for (Process p : procs) {
            OutputStream o = p.getOutputStream();
            o.close();
        }
        List<List<long[]>> recs = new ArrayList<>();
        for (int k = 0; k < procs.size(); k++) {
            Process p = procs.get(k);
            if (!p.waitFor(60, TimeUnit.SECONDS) || p.exitValue() != 0) {
                fail("Quartz node n" + (k + 1) + " did not stop cleanly within 60 s");
            }
            List<long[]> rs = new ArrayList<>();
            Path f = dir.resolve("n" + (k + 1) + ".rec");
            for (String line : Files.readAllLines(f)) {
                rs.add(Arrays.stream(line.split(" ")).mapToLong(Long::parseLong).toArray());
            }
            Files.delete(f);
            recs.add(rs);
        }
        Files.delete(dir);
        System.out.println(summary(n, nodes, t0, doneAt, loadMs, timedOut, recs));
    }

    /**
     * Schedules n jobs, each with one one-shot trigger starting at startAt, through Quartz's API
     * with a scheduler that is never started (a client of the job store), two threads at once,
     * and returns how long it took in ms.
     */
    static long load(String url, int n, long startAt) throws Exception {
        Properties p = quartz(url, "loader", 1);
        // No node runs yet, so nothing competes for the rows: the loader threads need not
        // take TRIGGER_ACCESS for every batch.
        p.setProperty("org.quartz.jobStore.lockOnInsert", "false");
        Scheduler loader = new StdSchedulerFactory(p).getScheduler();
        long start = System.currentTimeMillis();
        int threads = 2;
        List<Thread> ts = new ArrayList<>();
        List<Exception> errs = Collections.synchronizedList(new ArrayList<>());
        for (int w = 0; w < threads; w++) {
            int first = w;
            Thread t = new Thread(() -> {
                try {
                    Map<JobDetail, Set<? extends Trigger>> batch = new LinkedHashMap<>();
                    for (int i = first; i < n; i += threads) {
                        JobDetail job = newJob(NoopJob.class).withIdentity("j" + i, GROUP).build();
                        Trigger tr = newTrigger().withIdentity("t" + i, GROUP).forJob(job).startAt(new Date(startAt))
                                .withSchedule(SimpleScheduleBuilder.simpleSchedule()).build();
                        batch.put(job, Collections.singleton(tr));
                        if (batch.size() == LOAD_BATCH || i + threads >= n) {
                            loader.scheduleJobs(batch, false);
                            batch.clear();
                        }
                    }
                } catch (Exception e) {
                    errs.add(e);
                }
            });
            t.start();
            ts.add(t);
        }
        for (Thread t : ts) {
            t.join();
        }
        loader.shutdown(false);
        if (!errs.isEmpty()) {
            throw errs.get(0);
        }
        return System.currentTimeMillis() - start;
    }

    /** The figures, as JSON: lateness is start − T0, the instant every trigger was due. */
    static String summary(int n, int nodes, long t0, long doneAt, long loadMs, boolean timedOut, List<List<long[]>> recs) {
        int[] runs = new int[n];
        List<Double> late = new ArrayList<>();
        List<Integer> perProcess = new ArrayList<>();
        int misfired = 0;
        for (List<long[]> rs : recs) {
            perProcess.add(rs.size());
            for (long[] r : rs) {
                runs[(int) r[0]]++;
                late.add(r[2] / 1000.0 - t0);
                if (r[1] != t0) {
                    misfired++; // Quartz's misfire handling moved its scheduled fire time
                }
            }
        }
        int dup = 0;
        int missing = 0;
        for (int k : runs) {
            if (k == 0) {
                missing++;
            } else {
                dup += k - 1;
            }
        }
        Collections.sort(late);
        double seconds = (doneAt - t0) / 1000.0;
        return String.format(Locale.ROOT,
                "{\"quartz\":\"%s\",\"jobs\":%d,\"procs\":%d,\"seconds\":%.3f,\"jobsPerSec\":%.1f,"
                        + "\"p50Ms\":%.1f,\"p99Ms\":%.1f,\"maxMs\":%.1f,\"duplicates\":%d,\"missing\":%d,"
                        + "\"perProcess\":%s,\"loadSeconds\":%.3f,\"misfireRescheduled\":%d,\"timedOut\":%b}",
                version(), n, nodes, seconds, n / seconds, quantile(late, 0.50), quantile(late, 0.99),
                late.isEmpty() ? 0.0 : late.get(late.size() - 1), dup, missing, perProcess, loadMs / 1000.0,
                misfired, timedOut);
    }

    /** Nearest-rank quantile of sorted values (0 when empty). */
    static double quantile(List<Double> sorted, double q) {
        if (sorted.isEmpty()) {
            return 0;
        }
        int i = (int) Math.ceil(q * sorted.size()) - 1;
        return sorted.get(Math.max(0, Math.min(i, sorted.size() - 1)));
    }

    /** Runs Quartz's own tables_postgres.sql, shipped in its jar, on the database. */
    static void createTables(String url) throws Exception {
        String res = "org/quartz/impl/jdbcjobstore/tables_postgres.sql";
        String sql;
        try (InputStream in = Scheduler.class.getClassLoader().getResourceAsStream(res)) {
            if (in == null) {
                throw new IOException("the Quartz jar has no " + res);
            }
            sql = new String(in.readAllBytes(), StandardCharsets.UTF_8);
        }
        StringBuilder noComments = new StringBuilder();
        for (String line : sql.split("\n")) {
            if (!line.trim().startsWith("--")) {
                noComments.append(line).append('\n');
            }
        }
        try (Connection c = db(url); Statement st = c.createStatement()) {
            c.setAutoCommit(false);
            for (String stmt : noComments.toString().split(";")) {
                String s = stmt.trim();
                if (!s.isEmpty() && !s.equalsIgnoreCase("commit")) {
                    st.execute(s);
                }
            }
            // The lock rows a scheduler inserts on first use, as in a database already in use;
            // nodes starting at once would otherwise race to insert them (and log the loser's error).
            try (PreparedStatement ps = c.prepareStatement("insert into qrtz_locks (sched_name, lock_name) values (?, ?)")) {
                for (String lock : new String[] {"TRIGGER_ACCESS", "STATE_ACCESS"}) {
                    ps.setString(1, SCHED);
                    ps.setString(2, lock);
                    ps.executeUpdate();
                }
            }
            c.commit();
        }
    }

    static Connection db(String url) throws SQLException {
        return DriverManager.getConnection(url, env("QUARTZ_DB_USER", "postgres"), env("QUARTZ_DB_PASSWORD", ""));
    }

    static long micros() {
        Instant t = Instant.now();
        return t.getEpochSecond() * 1_000_000L + t.getNano() / 1000;
    }

    static String env(String k, String d) {
        String v = System.getenv(k);
        return v == null ? d : v;
    }

    static Map<String, String> flags(String[] args) {
        Map<String, String> m = new HashMap<>();
        for (int i = 0; i + 1 < args.length; i += 2) {
            if (!args[i].startsWith("--")) {
                fail("unexpected argument " + args[i]);
            }
            m.put(args[i].substring(2), args[i + 1]);
        }
        return m;
    }

    static int intFlag(Map<String, String> a, String k, int d) {
        return a.containsKey(k) ? Integer.parseInt(a.get(k)) : d;
    }

    static void fail(String msg) {
        System.err.println("quartz burst: " + msg);
        System.exit(1);
    }
}
