package io.millrace.compat;

import java.lang.annotation.ElementType;
import java.lang.annotation.Retention;
import java.lang.annotation.RetentionPolicy;
import java.lang.annotation.Target;
import java.nio.file.Files;
import java.nio.file.Path;
import java.nio.file.Paths;
import java.util.List;
import org.junit.jupiter.api.extension.AfterAllCallback;
import org.junit.jupiter.api.extension.BeforeAllCallback;
import org.junit.jupiter.api.extension.BeforeEachCallback;
import org.junit.jupiter.api.extension.ExtensionContext;
import org.junit.jupiter.api.extension.ParameterContext;
import org.junit.jupiter.api.extension.ParameterResolver;

/**
 * Starts one broker per test class (before all its tests) and stops it by PID afterwards.
 * Tests get it as a {@link BrokerProcess} parameter. Work dirs live under
 * {@code <build dir>/broker-work/<class>-<millis>} (system property millrace.work.dir).
 * Extra broker settings: {@link BrokerSettings} on the class.
 */
public final class BrokerExtension implements BeforeAllCallback, BeforeEachCallback, AfterAllCallback, ParameterResolver {
    @Retention(RetentionPolicy.RUNTIME)
    @Target(ElementType.TYPE)
    public @interface BrokerSettings {
        String[] value();
    }

    private static final ExtensionContext.Namespace NS = ExtensionContext.Namespace.create(BrokerExtension.class);

    @Override
    public void beforeAll(ExtensionContext ctx) throws Exception {
        Class<?> cls = ctx.getRequiredTestClass();
        BrokerSettings s = cls.getAnnotation(BrokerSettings.class);
        String base = System.getProperty("millrace.work.dir", "target/broker-work");
        Path work = Paths.get(base, cls.getSimpleName() + "-" + System.currentTimeMillis()).toAbsolutePath();
        Files.createDirectories(work);
        BrokerProcess broker = new BrokerProcess(work, s == null ? List.of() : List.of(s.value()));
        ctx.getStore(NS).put("broker", broker);
        try {
            broker.start();
        } catch (Exception e) {
            // Fail every test of the class with this error (not one class-level error).
            ctx.getStore(NS).put("startError", e);
        }
    }

    @Override
    public void beforeEach(ExtensionContext ctx) throws Exception {
        for (ExtensionContext c = ctx; c != null; c = c.getParent().orElse(null)) {
            Exception e = c.getStore(NS).get("startError", Exception.class);
            if (e != null) throw new IllegalStateException("broker did not start: " + e.getMessage(), e);
        }
    }

    @Override
    public void afterAll(ExtensionContext ctx) throws Exception {
        BrokerProcess broker = ctx.getStore(NS).remove("broker", BrokerProcess.class);
        if (broker != null) {
            int rc = broker.stop();
            if (rc != 0 && rc != 143) {
                System.err.println("broker exited " + rc + " on SIGTERM; stderr tail:\n" + broker.stderrTail(20));
            }
        }
    }

    @Override
    public boolean supportsParameter(ParameterContext p, ExtensionContext ctx) {
        return p.getParameter().getType() == BrokerProcess.class;
    }

    @Override
    public Object resolveParameter(ParameterContext p, ExtensionContext ctx) {
        // per-method contexts: the broker lives in the class-level store
        ExtensionContext c = ctx;
        while (c != null) {
            BrokerProcess b = c.getStore(NS).get("broker", BrokerProcess.class);
            if (b != null) return b;
            c = c.getParent().orElse(null);
        }
        throw new IllegalStateException("no broker started for " + ctx.getDisplayName());
    }
}
