package io.millrace.compat;

import java.io.BufferedReader;
import java.io.IOException;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.nio.charset.StandardCharsets;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;
import java.util.concurrent.TimeoutException;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

/**
 * One broker process (Millrace, or Apache Kafka through compat-tests/reference/kafka-shim.sh),
 * started with the Millrace command-line contract:
 * {@code BIN --data-dir DIR --listen 127.0.0.1:PORT [--set k=v ...]}, ready when stdout shows
 * {@code listening on 127.0.0.1:PORT}. The data dir survives {@link #kill()}/{@link #stop()}
 * so that {@link #restart()} brings the same broker back on the same port.
 *
 * <p>Only the process started here (and its own descendants, for the shim) is ever signalled.
 */
public final class BrokerProcess implements AutoCloseable {
    static final java.util.Set<String> HARNESS_ENV = java.util.Set.of(
        "MILLRACE_START_TIMEOUT", "MILLRACE_BUILD_TIMEOUT", "MILLRACE_KEEP_WORK");
    private static final Pattern LISTENING = Pattern.compile("listening on 127\\.0\\.0\\.1:(\\d+)");

    private final Path binary;
    private final Path workDir;
    private final Path dataDir;
    private final List<String> sets;
    private final Duration startTimeout;
    private Process process;
    private int port; // 0 until the first start
    private int starts;

    public BrokerProcess(Path workDir, List<String> sets) {
        this.binary = binary();
        this.workDir = workDir;
        this.dataDir = workDir.resolve("data");
        this.sets = List.copyOf(sets);
        this.startTimeout = Duration.ofSeconds(Long.parseLong(prop("millrace.start.timeout.s", "MILLRACE_START_TIMEOUT", "10")));
    }

    /** The repository root: compat-tests/java/../.. (Surefire runs in compat-tests/java). */
    static Path repoRoot() {
        Path here = Paths.get(System.getProperty("user.dir")).toAbsolutePath();
        for (Path p = here; p != null; p = p.getParent()) {
            if (Files.isDirectory(p.resolve("compat-tests")) && Files.exists(p.resolve("Cargo.toml"))) {
                return p;
            }
        }
        return here.resolve("../..").normalize();
    }

    static Path binary() {
        String b = prop("millrace.bin", "MILLRACE_BIN", "");
        if (!b.isEmpty()) return Paths.get(b).toAbsolutePath();
        return repoRoot().resolve("target/debug/millrace");
    }

    static String prop(String sys, String env, String dflt) {
        String v = System.getProperty(sys);
        if (v != null && !v.isBlank()) return v.trim();
        v = System.getenv(env);
        if (v != null && !v.isBlank()) return v.trim();
        return dflt;
    }

    public int port() { return port; }

    public String bootstrap() { return "127.0.0.1:" + port; }

    public Path workDir() { return workDir; }

    public boolean isAlive() { return process != null && process.isAlive(); }

    public long pid() { return process.pid(); }

    /** Starts the broker (first start: a free port; later starts: the same port). */
    public synchronized void start() throws IOException, InterruptedException {
        if (isAlive()) throw new IllegalStateException("broker already running (pid " + process.pid() + ")");
        if (!Files.isExecutable(binary)) {
            throw new IllegalStateException("broker binary " + binary + " is missing or not executable "
                + "(set MILLRACE_BIN, or cargo build -p millrace-broker)");
        }
        Files.createDirectories(dataDir);
        List<String> cmd = new ArrayList<>(List.of(binary.toString(), "--data-dir", dataDir.toString(),
            "--listen", "127.0.0.1:" + port));
        for (String s : sets) { cmd.add("--set"); cmd.add(s); }
        starts++;
        Path out = workDir.resolve("broker.stdout." + starts);
        Path err = workDir.resolve("broker.stderr." + starts);
        ProcessBuilder pb = new ProcessBuilder(cmd).redirectErrorStream(false)
            .redirectError(err.toFile()).redirectInput(ProcessBuilder.Redirect.from(new java.io.File("/dev/null")));
        // Millrace reads MILLRACE_* environment variables as config keys: drop the test-harness
        // knobs (MILLRACE_START_TIMEOUT etc.), which it would refuse as unknown keys.
        pb.environment().keySet().removeIf(HARNESS_ENV::contains);
        process = pb.start();
        CompletableFuture<Integer> ready = new CompletableFuture<>();
        Process p = process;
        Thread reader = new Thread(() -> {
            try (BufferedReader r = new BufferedReader(new InputStreamReader(p.getInputStream(), StandardCharsets.UTF_8));
                 PrintWriter w = new PrintWriter(Files.newBufferedWriter(out), true)) {
                String line;
                while ((line = r.readLine()) != null) {
                    w.println(line);
                    Matcher m = LISTENING.matcher(line);
                    if (!ready.isDone() && m.find()) ready.complete(Integer.parseInt(m.group(1)));
                }
            } catch (IOException e) {
                // stream closed: the process is gone
            } finally {
                ready.completeExceptionally(new IOException("broker stdout closed before 'listening on'"));
            }
        }, "broker-stdout-" + starts);
        reader.setDaemon(true);
        reader.start();
        int got;
        try {
            got = ready.get(startTimeout.toMillis(), TimeUnit.MILLISECONDS);
        } catch (TimeoutException | ExecutionException e) {
            String why = e instanceof TimeoutException
                ? "no 'listening on 127.0.0.1:PORT' line within " + startTimeout.toSeconds() + " s"
                : "broker exited before 'listening on' (" + (p.isAlive() ? "running" : "exit " + p.waitFor()) + ")";
            kill();
            throw new IOException(why + "; cmd " + cmd + "; stderr tail:\n" + tail(err, 30));
        }
        if (port != 0 && got != port) {
            kill();
            throw new IOException("broker restarted on port " + got + ", expected " + port);
        }
        port = got;
    }

    /** SIGKILL (a crash); waits until the process is gone. */
    public synchronized void kill() throws InterruptedException {
        if (process == null) return;
        // The reference shim is a bash script with Kafka's JVM as its child: kill our own descendants too.
        process.descendants().forEach(ProcessHandle::destroyForcibly);
        process.destroyForcibly();
        if (!process.waitFor(30, TimeUnit.SECONDS)) {
            throw new IllegalStateException("broker pid " + process.pid() + " survived SIGKILL for 30 s");
        }
        process.descendants().forEach(ProcessHandle::destroyForcibly);
    }

    /** SIGTERM (clean stop), SIGKILL after 20 s. Returns the exit code (or -1 if it had to be killed). */
    public synchronized int stop() throws InterruptedException {
        if (process == null || !process.isAlive()) return process == null ? 0 : process.exitValue();
        process.destroy(); // SIGTERM
        if (process.waitFor(20, TimeUnit.SECONDS)) return process.exitValue();
        System.err.println("broker pid " + process.pid() + " ignored SIGTERM for 20 s; SIGKILL");
        kill();
        return -1;
    }

    /** Starts again on the same data dir and port after {@link #kill()} or {@link #stop()}. */
    public void restart() throws IOException, InterruptedException {
        if (isAlive()) throw new IllegalStateException("stop or kill the broker first");
        start();
    }

    /** The last lines of the current start's stderr, for failure messages. */
    public String stderrTail(int lines) {
        return tail(workDir.resolve("broker.stderr." + starts), lines);
    }

    static String tail(Path f, int n) {
        try {
            List<String> all = Files.readAllLines(f, StandardCharsets.UTF_8);
            return String.join("\n", all.subList(Math.max(0, all.size() - n), all.size()));
        } catch (IOException | java.io.UncheckedIOException e) {
            return "(no " + f + ")";
        }
    }

    @Override
    public void close() throws InterruptedException {
        stop();
    }
}
