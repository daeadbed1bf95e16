/**
 * Quartz's side of agatebench's burst workload: N one-shot SimpleTriggers all due at one instant
 * T0, each firing its own no-op job, on K clustered Quartz schedulers sharing one PostgreSQL
 * database, as Quartz users run it (JobStoreTX, PostgreSQLDelegate, Quartz's own tables).
 *
 * <p>agatebench (internal/bench/peers.go) compiles these sources with javac against the jars of
 * Debian's libquartz2-java, libpostgresql-jdbc-java, libc3p0-java and libslf4j-java
 * (/usr/share/java) and runs {@link agatebench.Burst} in a fresh database. By hand:
 *
 * <pre>
 * J=/usr/share/java; CP=$J/quartz2.jar:$J/c3p0.jar:$J/postgresql.jar:$J/slf4j-api.jar:$J/slf4j-simple.jar
 * javac -d /tmp/qb -cp $CP src/agatebench/*.java
 * QUARTZ_DB_USER=postgres java -cp /tmp/qb:$CP agatebench.Burst --jdbc-url jdbc:postgresql://127.0.0.1:5432/quartz --n 20000 --nodes 2
 * </pre>
 *
 * It prints one JSON object with the same figures as internal/bench/river's burst mode.
 */
package agatebench;
