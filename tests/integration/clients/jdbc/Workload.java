// JDBC (pgjdbc) workload for tern's client tests (tests/integration/run_clients.py), compiled at test
// time with javac against /usr/share/java/postgresql.jar (Debian libpostgresql-jdbc-java).
//
// CLIENTS threads, each on its own connection with prepareThreshold=1 (every PreparedStatement is a
// named server-side statement from its first execution), run the same steps and check every result:
// autocommit inserts and selects, a batch (addBatch/executeBatch) committed with autocommit off, a
// batch that hits a duplicate key and is rolled back whole, a transaction that must stay on one server
// connection, a rollback that must leave nothing behind, and statements closed (Close messages) and
// parsed again on a connection without a statement cache. A step that fails records its SQLSTATE
// and the client goes on with a fresh connection, so one run reports every step that breaks.
//
// The last line printed is `RESULT {json}`; exit status 0 only when every step of every client passed
// and the final table totals are exact.
//
// usage: java -cp CLASSES:postgresql.jar Workload --port PORT [--host H] [--clients N] [--rows N]
//        [--prefix NAME]

import java.sql.BatchUpdateException;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.util.ArrayList;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.concurrent.CountDownLatch;
import java.util.concurrent.TimeUnit;

public final class Workload {
    static final String[] STEPS = {"connect", "autocommit_prepared", "batch", "batch_rollback", "transaction",
                                   "rollback", "close_statements", "verify"};
    static final int COUNTER_UPDATES = 5; // the transaction step adds this many to the client's counter
    static final long DEADLINE_SECONDS = 100; // the runner's own timeout is longer: print what we have
    // More connection properties from the runner (its tls mode: "&sslmode=require").
    static final String URL_EXTRA = System.getenv().getOrDefault("TERN_JDBC_URL_EXTRA", "");

    static String host = "127.0.0.1";
    static int port;
    static int clients = 40;
    static int rows = 10;
    static String prefix = "jdbc";

    static final class Failure extends Exception {
        Failure(String what) {
            super(what);
        }
    }

    static final class StepResult {
        int ok;
        int failed;
        final List<String> errors = new ArrayList<>();
    }

    static final Map<String, StepResult> report = new LinkedHashMap<>();

    static void check(boolean condition, String what) throws Failure {
        if (!condition) {
            throw new Failure(what);
        }
    }

    static String itemValue(int client, int seq) {
        return "c" + client + "\ts" + seq + "\n\\ \u00e9\u2603 " + "x".repeat(seq % 37);
    }

    static String describe(Throwable e) {
        if (e instanceof SQLException) {
            SQLException s = (SQLException) e;
            // A batch reports the statement's own error as the next exception.
            if (s instanceof BatchUpdateException && s.getNextException() != null) {
                s = s.getNextException();
            }
            String message = String.valueOf(s.getMessage()).split("\n")[0];
            return (s.getSQLState() != null ? s.getSQLState() + " " : "") + message;
        }
        return e.getClass().getSimpleName() + ": " + String.valueOf(e.getMessage()).split("\n")[0];
    }

    static String json(String s) {
        StringBuilder b = new StringBuilder("\"");
        for (char ch : s.toCharArray()) {
            if (ch == '"' || ch == '\\') {
                b.append('\\').append(ch);
            } else if (ch < 0x20) {
                b.append(String.format("\\u%04x", (int) ch));
            } else {
                b.append(ch);
            }
        }
        return b.append('"').toString();
    }

    static final class Client {
        final int c;
        final String items = prefix + "_items";
        final String insertItem = "insert into " + prefix + "_items (client, seq, val) values (?, ?, ?)";
        final String selectItem = "select val from " + prefix + "_items where client = ? and seq = ?";
        final String countItems = "select count(*) from " + prefix + "_items where client = ? and seq >= ? and seq < ?";
        final String selectCounter = "select n from " + prefix + "_counters where client = ?";
        final String bumpCounter = "update " + prefix + "_counters set n = n + ? where client = ? returning n";
        Connection conn;

        Client(int c) {
            this.c = c;
        }

        void connect() throws SQLException {
            close();
            conn = DriverManager.getConnection("jdbc:postgresql://" + host + ":" + port + "/postgres?user=postgres" + URL_EXTRA
                    + "&prepareThreshold=1&connectTimeout=30&socketTimeout=60&ApplicationName=jdbc-" + c);
        }

        void close() {
            if (conn != null) {
                try {
                    conn.close();
                } catch (SQLException e) {
                    // already gone
                }
                conn = null;
            }
        }

        int queryInt(String sql, int... params) throws SQLException, Failure {
            try (PreparedStatement ps = conn.prepareStatement(sql)) {
                for (int i = 0; i < params.length; i++) {
                    ps.setInt(i + 1, params[i]);
                }
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "no row from " + sql);
                    int v = rs.getInt(1);
                    check(!rs.next(), "more than one row from " + sql);
                    return v;
                }
            }
        }

        void stepConnect() throws Exception {
            connect();
            try (Statement st = conn.createStatement(); ResultSet rs = st.executeQuery("select 1")) {
                check(rs.next() && rs.getInt(1) == 1, "select 1");
            }
            try (Statement st = conn.createStatement()) {
                check(st.executeUpdate("insert into " + prefix + "_counters (client, n) values (" + c + ", 0)") == 1,
                      "counter row");
            }
        }

        void stepAutocommitPrepared() throws Exception {
            conn.setAutoCommit(true);
            try (PreparedStatement ins = conn.prepareStatement(insertItem)) {
                for (int seq = 0; seq < rows; seq++) {
                    ins.setInt(1, c);
                    ins.setInt(2, seq);
                    ins.setString(3, itemValue(c, seq));
                    check(ins.executeUpdate() == 1, "insert count");
                }
            }
            try (PreparedStatement sel = conn.prepareStatement(selectItem)) {
                for (int seq = rows - 1; seq >= 0; seq--) {
                    sel.setInt(1, c);
                    sel.setInt(2, seq);
                    try (ResultSet rs = sel.executeQuery()) {
                        check(rs.next() && itemValue(c, seq).equals(rs.getString(1)) && !rs.next(),
                              "prepared select of seq " + seq);
                    }
                }
            }
        }

        int[] batchInsert(int from, int to, boolean duplicate) throws SQLException {
            try (PreparedStatement ins = conn.prepareStatement(insertItem)) {
                for (int seq = from; seq < to; seq++) {
                    ins.setInt(1, c);
                    ins.setInt(2, seq);
                    ins.setString(3, itemValue(c, seq));
                    ins.addBatch();
                }
                if (duplicate) { // seq 0 exists since autocommit_prepared: 23505 ends the batch
                    ins.setInt(1, c);
                    ins.setInt(2, 0);
                    ins.setString(3, "duplicate");
                    ins.addBatch();
                }
                return ins.executeBatch();
            }
        }

        void stepBatch() throws Exception {
            conn.setAutoCommit(false);
            int[] counts = batchInsert(rows, 2 * rows, false);
            check(counts.length == rows, "batch returned " + counts.length + " counts");
            for (int n : counts) {
                check(n == 1 || n == Statement.SUCCESS_NO_INFO, "batch count " + n);
            }
            conn.commit();
            conn.setAutoCommit(true);
            check(queryInt(countItems, c, rows, 2 * rows) == rows, "committed batch rows");
        }

        void stepBatchRollback() throws Exception {
            conn.setAutoCommit(false);
            try {
                batchInsert(2 * rows, 3 * rows, true);
                throw new Failure("a batch with a duplicate key succeeded");
            } catch (BatchUpdateException e) {
                SQLException cause = e.getNextException() != null ? e.getNextException() : e;
                check("23505".equals(cause.getSQLState()), "batch failed with " + describe(e) + ", want 23505");
            }
            conn.rollback();
            check(queryInt(countItems, c, 2 * rows, 3 * rows) == 0, "the rolled-back batch left rows");
            conn.commit();
            int[] counts = batchInsert(2 * rows, 3 * rows, false);
            check(counts.length == rows, "second batch returned " + counts.length + " counts");
            conn.commit();
            conn.setAutoCommit(true);
            check(queryInt(countItems, c, 2 * rows, 3 * rows) == rows, "committed second batch rows");
        }

        void stepTransaction() throws Exception {
            conn.setAutoCommit(false);
            int pid = queryInt("select pg_backend_pid()");
            check(queryInt(selectCounter, c) == 0, "counter starts at 0");
            try (PreparedStatement bump = conn.prepareStatement(bumpCounter)) {
                for (int k = 1; k <= COUNTER_UPDATES; k++) {
                    bump.setInt(1, 1);
                    bump.setInt(2, c);
                    try (ResultSet rs = bump.executeQuery()) {
                        check(rs.next() && rs.getInt(1) == k, "counter after " + k + " updates");
                    }
                }
            }
            check(queryInt("select pg_backend_pid()") == pid, "the transaction stayed on one server connection");
            check(queryInt("select count(*) from pg_prepared_statements where not from_sql and statement like "
                           + "'update %_counters set n = n + $1 where client = $2 returning n'") >= 1,
                  "pgjdbc prepared the update on this server connection");
            conn.commit();
            conn.setAutoCommit(true);
            check(queryInt(selectCounter, c) == COUNTER_UPDATES, "committed counter");
        }

        void stepRollback() throws Exception {
            conn.setAutoCommit(false);
            try (PreparedStatement ins = conn.prepareStatement(insertItem)) {
                ins.setInt(1, c);
                ins.setInt(2, 1000000);
                ins.setString(3, "rolled back");
                check(ins.executeUpdate() == 1, "insert in the transaction");
            }
            try (PreparedStatement bump = conn.prepareStatement(bumpCounter)) {
                bump.setInt(1, 100);
                bump.setInt(2, c);
                try (ResultSet rs = bump.executeQuery()) {
                    check(rs.next() && rs.getInt(1) == COUNTER_UPDATES + 100, "counter inside the transaction");
                }
            }
            conn.rollback();
            conn.setAutoCommit(true);
            check(queryInt(countItems, c, 1000000, 1000001) == 0, "the rolled-back insert is gone");
            check(queryInt(selectCounter, c) == COUNTER_UPDATES, "the rolled-back update is gone");
        }

        void stepCloseStatements() throws Exception {
            // Without a statement cache, closing a PreparedStatement makes pgjdbc send Close for its
            // server-side statement ahead of the next query, and the same text is parsed again later.
            // The client's own connection is closed first: in session pooling it holds a server
            // connection, and 10x clients each holding one while asking for another would deadlock.
            close();
            try (Connection uncached = DriverManager.getConnection(
                     "jdbc:postgresql://" + host + ":" + port + "/postgres?user=postgres" + URL_EXTRA + "&prepareThreshold=1"
                     + "&preparedStatementCacheQueries=0&connectTimeout=30&socketTimeout=60&ApplicationName=jdbc-"
                     + c + "-uncached")) {
                for (int round = 0; round < 3; round++) {
                    for (int k = 0; k < 4; k++) {
                        try (PreparedStatement ps = uncached.prepareStatement("select ?::int + " + k)) {
                            for (int i = 0; i < 2; i++) {
                                ps.setInt(1, c * 100 + round);
                                try (ResultSet rs = ps.executeQuery()) {
                                    check(rs.next() && rs.getInt(1) == c * 100 + round + k,
                                          "query " + k + " of round " + round);
                                }
                            }
                        }
                    }
                }
            }
        }

        void stepVerify() throws Exception {
            conn.setAutoCommit(true);
            int want = 0;
            for (int seq = 0; seq < 3 * rows; seq++) {
                want += itemValue(c, seq).length();
            }
            try (PreparedStatement ps = conn.prepareStatement(
                    "select count(*), coalesce(sum(length(val)), 0) from " + items + " where client = ?")) {
                ps.setInt(1, c);
                try (ResultSet rs = ps.executeQuery()) {
                    check(rs.next(), "no row");
                    int n = rs.getInt(1);
                    int len = rs.getInt(2);
                    check(n == 3 * rows && len == want, "items of client " + c + ": " + n + " rows, length " + len
                                                        + ", want " + (3 * rows) + ", " + want);
                }
            }
        }

        void run(String step) throws Exception {
            switch (step) {
            case "connect": stepConnect(); break;
            case "autocommit_prepared": stepAutocommitPrepared(); break;
            case "batch": stepBatch(); break;
            case "batch_rollback": stepBatchRollback(); break;
            case "transaction": stepTransaction(); break;
            case "rollback": stepRollback(); break;
            case "close_statements": stepCloseStatements(); break;
            case "verify": stepVerify(); break;
            default: throw new IllegalArgumentException(step);
            }
        }
    }

    static void runClient(int index, CountDownLatch start) {
        Client client = new Client(index);
        try {
            start.await();
            for (String step : STEPS) {
                String outcome = null;
                try {
                    if (client.conn == null && !step.equals("connect")) {
                        client.connect();
                    }
                    client.run(step);
                } catch (Exception e) {
                    outcome = describe(e);
                    client.close();
                }
                synchronized (report) {
                    StepResult r = report.get(step);
                    if (outcome == null) {
                        r.ok++;
                    } else {
                        r.failed++;
                        if (r.errors.size() < 5 && !r.errors.contains(outcome)) {
                            r.errors.add(outcome);
                        }
                    }
                }
            }
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            client.close();
        }
    }

    public static void main(String[] args) throws Exception {
        for (int i = 0; i + 1 < args.length; i += 2) {
            switch (args[i]) {
            case "--host": host = args[i + 1]; break;
            case "--port": port = Integer.parseInt(args[i + 1]); break;
            case "--clients": clients = Integer.parseInt(args[i + 1]); break;
            case "--rows": rows = Integer.parseInt(args[i + 1]); break;
            case "--prefix": prefix = args[i + 1]; break;
            default: throw new IllegalArgumentException("unknown option " + args[i]);
            }
        }
        if (port == 0) {
            throw new IllegalArgumentException("--port is required");
        }
        for (String s : STEPS) {
            report.put(s, new StepResult());
        }
        long started = System.nanoTime();
        String url = "jdbc:postgresql://" + host + ":" + port
                     + "/postgres?user=postgres" + URL_EXTRA + "&connectTimeout=30&socketTimeout=60";
        try (Connection conn = DriverManager.getConnection(url); Statement st = conn.createStatement()) {
            st.execute("drop table if exists " + prefix + "_items, " + prefix + "_counters");
            st.execute("create table " + prefix + "_items (client int, seq int, val text not null, "
                       + "primary key (client, seq))");
            st.execute("create table " + prefix + "_counters (client int primary key, n int not null)");
        }

        CountDownLatch start = new CountDownLatch(1);
        List<Thread> threads = new ArrayList<>();
        for (int i = 0; i < clients; i++) {
            final int index = i;
            Thread t = new Thread(() -> runClient(index, start), "client-" + i);
            t.setDaemon(true);
            threads.add(t);
            t.start();
        }
        start.countDown();
        long deadline = started + TimeUnit.SECONDS.toNanos(DEADLINE_SECONDS);
        String totalsError = null;
        for (Thread t : threads) {
            t.join(Math.max(1, TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime())));
            if (t.isAlive()) {
                totalsError = "the workload did not finish within " + DEADLINE_SECONDS + " s";
                break;
            }
        }

        long items = -1;
        long counterSum = -1;
        if (totalsError == null) {
            try (Connection conn = DriverManager.getConnection(url); Statement st = conn.createStatement();
                 ResultSet rs = st.executeQuery("select (select count(*) from " + prefix + "_items), "
                                                + "(select coalesce(sum(n), 0) from " + prefix + "_counters)")) {
                rs.next();
                items = rs.getLong(1);
                counterSum = rs.getLong(2);
            }
            if (items != (long) clients * 3 * rows || counterSum != (long) clients * COUNTER_UPDATES) {
                totalsError = "totals items " + items + " counter_sum " + counterSum + ", want "
                              + ((long) clients * 3 * rows) + " and " + ((long) clients * COUNTER_UPDATES);
            }
        }
        boolean ok = totalsError == null;
        StringBuilder steps = new StringBuilder();
        synchronized (report) {
            for (Map.Entry<String, StepResult> e : report.entrySet()) {
                StepResult r = e.getValue();
                ok &= r.failed == 0 && r.ok == clients;
                System.out.printf("%-20s ok %3d failed %3d %s%n", e.getKey(), r.ok, r.failed,
                                  String.join("; ", r.errors));
                List<String> errors = new ArrayList<>();
                for (String err : r.errors) {
                    errors.add(json(err));
                }
                steps.append(steps.length() == 0 ? "" : ", ").append(json(e.getKey()))
                    .append(": {\"ok\": ").append(r.ok)
                    .append(", \"failed\": ").append(r.failed).append(", \"errors\": [")
                    .append(String.join(", ", errors)).append("]}");
            }
        }
        double elapsed = (System.nanoTime() - started) / 1e9;
        System.out.println("RESULT {\"stack\": \"jdbc\", \"clients\": " + clients + ", \"ok\": " + ok
                           + ", \"elapsed_s\": " + String.format("%.2f", elapsed) + ", \"totals\": {\"items\": " + items
                           + ", \"counter_sum\": " + counterSum + "}"
                           + (totalsError != null ? ", \"totals_error\": " + json(totalsError) : "")
                           + ", \"steps\": {" + steps + "}}");
        System.out.flush();
        System.exit(ok ? 0 : 1);
    }
}
