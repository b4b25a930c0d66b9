//! The benchmark modes. Every loop is bounded by a count and a time limit.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context as _};
use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::Message;
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::statistics::Statistics;
use rdkafka::{ClientContext, Offset, TopicPartitionList};

use crate::broker_stats;
use crate::report::{progress, Latency, Report};
use crate::{seconds, Common, ConsumeArgs, FirstProduceArgs, ProduceArgs, TrickleArgs};

/// Default message count when neither --count nor --duration is given.
const DEFAULT_COUNT: u64 = 100_000;
/// Hard cap on one run's length, whatever the options say.
const RUN_SECONDS_MAX: f64 = 3_600.0;
/// How long to wait for outstanding deliveries at the end of a produce run.
const FLUSH_TIMEOUT: Duration = Duration::from_secs(120);
/// How long `first-produce` waits for one attempt's acknowledgement before trying again.
const FIRST_ACK_WAIT: Duration = Duration::from_secs(3);
/// Histogram range: 1 µs .. 10 min, 3 significant digits.
const LATENCY_US_MAX: u64 = 600_000_000;

fn histogram() -> anyhow::Result<Histogram<u64>> {
    Histogram::new_with_bounds(1, LATENCY_US_MAX, 3).context("histogram")
}

fn client_config(common: &Common) -> anyhow::Result<ClientConfig> {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", &common.bootstrap);
    for extra in &common.extra {
        let (k, v) = extra.split_once('=').context("-X takes name=value")?;
        config.set(k, v);
    }
    Ok(config)
}

/// How long `ensure_topic` keeps trying while a fresh cluster elects its controller.
const CREATE_TOPIC_RETRY: Duration = Duration::from_secs(60);

fn ensure_topic(common: &Common) -> anyhow::Result<()> {
    let admin: AdminClient<DefaultClientContext> = client_config(common)?.create()?;
    let topic = NewTopic::new(
        &common.topic,
        common.partitions,
        TopicReplication::Fixed(common.replication_factor),
    );
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let deadline = Instant::now() + CREATE_TOPIC_RETRY;
    loop {
        let failure = match futures_lite_block_on(admin.create_topics([&topic], &options)) {
            Ok(results) => match results.into_iter().find_map(|r| match r {
                Ok(_) | Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => None,
                Err((t, e)) => Some(format!("cannot create topic {t}: {e}")),
            }) {
                None => return Ok(()),
                Some(failure) => failure,
            },
            Err(e) => format!("create topics: {e}"),
        };
        if Instant::now() > deadline {
            bail!("{failure}");
        }
        eprintln!("{failure}; retrying");
        std::thread::sleep(Duration::from_millis(500));
    }
}

/// Runs a future to completion on this thread (the admin client's futures need no runtime).
fn futures_lite_block_on<F: std::future::Future>(future: F) -> F::Output {
    use std::task::{Context, Poll, Wake, Waker};
    struct ThreadWaker(std::thread::Thread);
    impl Wake for ThreadWaker {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
    let mut cx = Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park_timeout(Duration::from_millis(10));
    }
}

/// Delivery bookkeeping shared with librdkafka's delivery-report thread.
struct Deliveries {
    latency: Mutex<Histogram<u64>>,
    acked: AtomicU64,
    errors: AtomicU64,
    first_error: Mutex<Option<String>>,
}

impl ClientContext for Deliveries {}

impl ProducerContext for Deliveries {
    type DeliveryOpaque = Box<Instant>;

    fn delivery(&self, result: &DeliveryResult<'_>, sent_at: Self::DeliveryOpaque) {
        match result {
            Ok(_) => {
                let us = sent_at
                    .elapsed()
                    .as_micros()
                    .clamp(1, LATENCY_US_MAX as u128) as u64;
                if let Ok(mut h) = self.latency.lock() {
                    let _ = h.record(us);
                }
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err((e, _)) => {
                self.errors.fetch_add(1, Ordering::Relaxed);
                if let Ok(mut first) = self.first_error.lock() {
                    first.get_or_insert_with(|| e.to_string());
                }
            }
        }
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0)
}

/// Produce (and, for `e2e`, consume the same messages and measure send → receipt).
pub fn produce(args: &ProduceArgs, e2e: bool) -> anyhow::Result<Report> {
    let creating = Instant::now();
    ensure_topic(&args.common)?;
    let deliveries = Deliveries {
        latency: Mutex::new(histogram()?),
        acked: AtomicU64::new(0),
        errors: AtomicU64::new(0),
        first_error: Mutex::new(None),
    };
    let mut config = client_config(&args.common)?;
    config
        .set("acks", &args.acks)
        .set("compression.type", &args.compression)
        .set("linger.ms", args.linger_ms.to_string())
        .set("batch.size", args.batch_size.to_string())
        .set("enable.idempotence", args.idempotence.to_string())
        .set("queue.buffering.max.kbytes", "1048576")
        .set("message.timeout.ms", "120000");
    let producer: ThreadedProducer<Deliveries> = config.create_with_context(deliveries)?;
    let deliveries = producer.context().clone();
    let topic_ready_seconds = if args.prime {
        prime(&producer, &args.common)?;
        Some(creating.elapsed().as_secs_f64())
    } else {
        None
    };

    let limit = seconds(
        args.duration
            .unwrap_or(RUN_SECONDS_MAX)
            .min(RUN_SECONDS_MAX),
    );
    let count = args.count.unwrap_or(if args.duration.is_some() {
        u64::MAX
    } else {
        DEFAULT_COUNT
    });
    let size = args.message_size.max(8);
    let mut payload = vec![b'x'; size];
    let bytes_per_sec = args.rate_mb.map(|mb| mb * 1e6);

    let consumer = if e2e {
        Some(start_e2e_consumer(&args.common, count)?)
    } else {
        None
    };
    let before = args.common.broker_pid.and_then(broker_stats::sample);
    let start = Instant::now();
    let mut sent = 0u64;
    while sent < count && start.elapsed() < limit {
        if let Some(rate) = bytes_per_sec {
            let due = Duration::from_secs_f64((sent * size as u64) as f64 / rate);
            let elapsed = start.elapsed();
            if due > elapsed {
                std::thread::sleep(due - elapsed);
            }
        }
        payload[..8].copy_from_slice(&now_ns().to_be_bytes());
        let mut record: BaseRecord<'_, (), [u8], Box<Instant>> =
            BaseRecord::with_opaque_to(&args.common.topic, Box::new(Instant::now()))
                .payload(&payload[..]);
        loop {
            match producer.send(record) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                    record = back;
                    std::thread::sleep(Duration::from_millis(1));
                    if start.elapsed() > limit + FLUSH_TIMEOUT {
                        bail!("producer queue stayed full");
                    }
                }
                Err((e, _)) => bail!("send failed: {e}"),
            }
        }
        sent += 1;
        if sent.is_multiple_of(10_000) {
            progress(
                sent,
                args.count,
                (sent * size as u64) as f64 / 1e6,
                start.elapsed().as_secs_f64(),
            );
        }
    }
    producer.flush(FLUSH_TIMEOUT).context("flush")?;
    let elapsed = start.elapsed().as_secs_f64();
    let after = args.common.broker_pid.and_then(broker_stats::sample);

    let acked = deliveries.acked.load(Ordering::Relaxed);
    let mut report = Report {
        label: args.common.label.clone(),
        mode: if e2e { "e2e".into() } else { "produce".into() },
        messages: acked,
        bytes: acked * size as u64,
        seconds: elapsed,
        errors: deliveries.errors.load(Ordering::Relaxed),
        topic_ready_seconds,
        json: args.common.json,
        ..Report::default()
    };
    if let Ok(h) = deliveries.latency.lock() {
        report.latency = Some(Latency::from_histogram(&h));
    }
    if let Some(handle) = consumer {
        let h = handle
            .join()
            .map_err(|_| anyhow::anyhow!("e2e consumer panicked"))??;
        report.latency = Some(Latency::from_histogram(&h));
    }
    fill_broker(&mut report, before, after);
    report.finish_rates();
    if let Ok(Some(e)) = deliveries.first_error.lock().map(|g| g.clone()) {
        eprintln!("first delivery error: {e}");
    }
    Ok(report)
}

/// Writes one small record to every partition of the topic and waits for all acknowledgements,
/// then clears the delivery counters so the timed run starts from zero.
fn prime(producer: &ThreadedProducer<Deliveries>, common: &Common) -> anyhow::Result<()> {
    let deliveries = producer.context();
    for partition in 0..common.partitions {
        let record: BaseRecord<'_, (), [u8], Box<Instant>> =
            BaseRecord::with_opaque_to(&common.topic, Box::new(Instant::now()))
                .partition(partition)
                .payload(&b"prime"[..]);
        producer
            .send(record)
            .map_err(|(e, _)| anyhow::anyhow!("prime send failed: {e}"))?;
    }
    producer.flush(FLUSH_TIMEOUT).context("prime flush")?;
    let acked = deliveries.acked.swap(0, Ordering::Relaxed);
    let errors = deliveries.errors.swap(0, Ordering::Relaxed);
    if errors > 0 || acked != common.partitions as u64 {
        bail!(
            "priming acknowledged {acked} of {} partitions ({errors} errors)",
            common.partitions
        );
    }
    if let Ok(mut h) = deliveries.latency.lock() {
        h.reset();
    }
    Ok(())
}

fn fill_broker(
    report: &mut Report,
    before: Option<broker_stats::Sample>,
    after: Option<broker_stats::Sample>,
) {
    if let (Some(b), Some(a)) = (before, after) {
        report.broker_cpu_seconds = Some(a.cpu_seconds - b.cpu_seconds);
        report.broker_peak_rss_mb = Some(a.peak_rss_bytes as f64 / 1e6);
        report.broker_rss_mb = Some(a.rss_bytes as f64 / 1e6);
    }
}

fn assign_all<C: ConsumerContext>(
    consumer: &BaseConsumer<C>,
    topic: &str,
    at_end: bool,
) -> anyhow::Result<(u64, i32)> {
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    let mut list = TopicPartitionList::new();
    let mut available = 0u64;
    for &p in &partitions {
        // A new topic's partitions may still be getting their leaders: retry for a while.
        let deadline = Instant::now() + Duration::from_secs(60);
        let (low, high) = loop {
            match consumer.fetch_watermarks(topic, p, Duration::from_secs(30)) {
                Ok(marks) => break marks,
                Err(e) if Instant::now() > deadline => return Err(e.into()),
                Err(_) => std::thread::sleep(Duration::from_millis(100)),
            }
        };
        available += (high - low).max(0) as u64;
        let offset = if at_end {
            Offset::Offset(high)
        } else {
            Offset::Offset(low)
        };
        list.add_partition_offset(topic, p, offset)?;
    }
    consumer.assign(&list)?;
    Ok((available, partitions.len() as i32))
}

fn consumer_config(common: &Common) -> anyhow::Result<ClientConfig> {
    let mut config = client_config(common)?;
    config
        .set("group.id", format!("millrace-bench-{}", now_ns()))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("fetch.wait.max.ms", "100");
    Ok(config)
}

fn start_e2e_consumer(
    common: &Common,
    count: u64,
) -> anyhow::Result<std::thread::JoinHandle<anyhow::Result<Histogram<u64>>>> {
    let consumer: BaseConsumer = consumer_config(common)?.create()?;
    assign_all(&consumer, &common.topic, true)?;
    let limit = seconds(RUN_SECONDS_MAX);
    Ok(std::thread::spawn(move || {
        let mut h = histogram()?;
        let start = Instant::now();
        let mut idle_since = Instant::now();
        let mut received = 0u64;
        while received < count && start.elapsed() < limit {
            match consumer.poll(Duration::from_millis(100)) {
                Some(Ok(m)) => {
                    idle_since = Instant::now();
                    if let Some(p) = m.payload() {
                        if let Some(stamp) = p.get(..8) {
                            let mut b = [0u8; 8];
                            b.copy_from_slice(stamp);
                            let us = now_ns().saturating_sub(u64::from_be_bytes(b)) / 1000;
                            let _ = h.record(us.clamp(1, LATENCY_US_MAX));
                        }
                    }
                    received += 1;
                }
                Some(Err(e)) => eprintln!("consume error: {e}"),
                None if count == u64::MAX && idle_since.elapsed() > Duration::from_secs(5) => break,
                None => {}
            }
        }
        Ok(h)
    }))
}

/// Consume from the beginning: everything present at start, or --count / --bytes.
pub fn consume(args: &ConsumeArgs) -> anyhow::Result<Report> {
    let consumer: BaseConsumer = consumer_config(&args.common)?
        .set("fetch.max.bytes", "52428800")
        .set("max.partition.fetch.bytes", "10485760")
        .set("queued.max.messages.kbytes", "1048576")
        .create()?;
    let (available, _) = assign_all(&consumer, &args.common.topic, false)?;
    let count = args.count.unwrap_or(available);
    let byte_limit = args.bytes.unwrap_or(u64::MAX);
    let limit = seconds(args.timeout.min(RUN_SECONDS_MAX));
    let before = args.common.broker_pid.and_then(broker_stats::sample);
    let start = Instant::now();
    let (mut messages, mut bytes, mut errors) = (0u64, 0u64, 0u64);
    while messages < count && bytes < byte_limit && start.elapsed() < limit {
        match consumer.poll(Duration::from_millis(100)) {
            Some(Ok(m)) => {
                messages += 1;
                bytes += m.payload().map_or(0, |p| p.len() as u64);
                if messages.is_multiple_of(50_000) {
                    progress(
                        messages,
                        Some(count),
                        bytes as f64 / 1e6,
                        start.elapsed().as_secs_f64(),
                    );
                }
            }
            Some(Err(_)) => errors += 1,
            None => {}
        }
    }
    let after = args.common.broker_pid.and_then(broker_stats::sample);
    let mut report = Report {
        label: args.common.label.clone(),
        mode: "consume".into(),
        messages,
        bytes,
        seconds: start.elapsed().as_secs_f64(),
        errors,
        json: args.common.json,
        ..Report::default()
    };
    fill_broker(&mut report, before, after);
    report.finish_rates();
    Ok(report)
}

/// The consumer's Fetch requests so far, from librdkafka's statistics (every broker connection).
#[derive(Default)]
struct FetchCount {
    fetches: AtomicU64,
}

impl ClientContext for FetchCount {
    fn stats(&self, statistics: Statistics) {
        let total: i64 = statistics
            .brokers
            .values()
            .filter_map(|b| b.req.get("Fetch"))
            .sum();
        self.fetches
            .store(u64::try_from(total).unwrap_or(0), Ordering::Relaxed);
    }
}

impl ConsumerContext for FetchCount {}

/// How often librdkafka reports statistics in `trickle` (the Fetch count's staleness).
const TRICKLE_STATS_MS: u64 = 250;

/// One consumer of every partition, reading from the end, while `rate` records a second go
/// round-robin to the partitions for `duration` seconds. Reports the broker's CPU seconds over
/// that phase and the consumer's Fetch requests per second.
pub fn trickle(args: &TrickleArgs) -> anyhow::Result<Report> {
    ensure_topic(&args.common)?;
    let consumer: BaseConsumer<FetchCount> = consumer_config(&args.common)?
        .set("fetch.wait.max.ms", "500")
        .set("statistics.interval.ms", TRICKLE_STATS_MS.to_string())
        .create_with_context(FetchCount::default())?;
    let (_, partitions) = assign_all(&consumer, &args.common.topic, true)?;
    let producer: rdkafka::producer::BaseProducer = client_config(&args.common)?
        .set("acks", "1")
        .set("linger.ms", "0")
        .set("enable.idempotence", "false")
        .create()?;
    // Settle: positions resolved and the first fetches answered before the clock starts.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(2) {
        let _ = consumer.poll(Duration::from_millis(50));
    }
    let payload = vec![b'x'; args.message_size];
    let period = Duration::from_secs_f64(1.0 / args.rate.max(0.001));
    let limit = seconds(args.duration.min(RUN_SECONDS_MAX));
    let fetches_before = consumer.context().fetches.load(Ordering::Relaxed);
    let before = args.common.broker_pid.and_then(broker_stats::sample);
    let start = Instant::now();
    let (mut sent, mut received, mut errors) = (0u64, 0u64, 0u64);
    while start.elapsed() < limit {
        if start.elapsed() >= period.mul_f64(sent as f64) {
            let partition = (sent % partitions.max(1) as u64) as i32;
            let record = BaseRecord::<(), [u8]>::to(&args.common.topic)
                .partition(partition)
                .payload(&payload[..]);
            if producer.send(record).is_err() {
                errors += 1;
            }
            sent += 1;
        }
        producer.poll(Duration::ZERO);
        match consumer.poll(Duration::from_millis(10)) {
            Some(Ok(_)) => received += 1,
            Some(Err(_)) => errors += 1,
            None => {}
        }
    }
    let elapsed = start.elapsed().as_secs_f64();
    let after = args.common.broker_pid.and_then(broker_stats::sample);
    let fetches_after = consumer.context().fetches.load(Ordering::Relaxed);
    let _ = producer.flush(FLUSH_TIMEOUT);
    let mut report = Report {
        label: args.common.label.clone(),
        mode: "trickle".into(),
        messages: received,
        bytes: received * args.message_size as u64,
        seconds: elapsed,
        errors,
        fetch_requests_per_s: Some(fetches_after.saturating_sub(fetches_before) as f64 / elapsed),
        json: args.common.json,
        ..Report::default()
    };
    fill_broker(&mut report, before, after);
    report.finish_rates();
    Ok(report)
}

/// Records whether the first-produce probe was acknowledged.
#[derive(Default)]
struct FirstDelivery {
    ok: std::sync::atomic::AtomicBool,
}

impl ClientContext for FirstDelivery {}

impl ProducerContext for FirstDelivery {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if result.is_ok() {
            self.ok.store(true, Ordering::Release);
        }
    }
}

/// Starts the broker command and measures the time to the first acknowledged produce.
pub fn first_produce(args: &FirstProduceArgs) -> anyhow::Result<Report> {
    let (program, rest) = args.command.split_first().context("no broker command")?;
    let start = Instant::now();
    let mut child = std::process::Command::new(program)
        .args(rest)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .with_context(|| format!("cannot start {program}"))?;
    let limit = seconds(args.timeout.min(RUN_SECONDS_MAX));
    let outcome = (|| -> anyhow::Result<f64> {
        while start.elapsed() < limit {
            let producer: rdkafka::producer::BaseProducer<FirstDelivery> = ClientConfig::new()
                .set("bootstrap.servers", &args.bootstrap)
                .set("reconnect.backoff.ms", "1")
                .set("reconnect.backoff.max.ms", "5")
                .set("retry.backoff.ms", "1")
                .set("retry.backoff.max.ms", "5")
                .set("topic.metadata.refresh.fast.interval.ms", "1")
                .set("message.timeout.ms", "2000")
                .set("linger.ms", "0")
                .set("enable.idempotence", "false")
                .create_with_context(FirstDelivery::default())?;
            if producer
                .send(BaseRecord::<(), [u8], ()>::to("first-produce").payload(&b"hello"[..]))
                .is_ok()
            {
                // Serve the delivery report as soon as it arrives: `flush` waits in steps of
                // up to 100 ms, which once added a constant ~100 ms to every W6 figure.
                let waiting = Instant::now();
                while producer.in_flight_count() > 0 && waiting.elapsed() < FIRST_ACK_WAIT {
                    producer.poll(Duration::from_millis(1));
                }
                producer.poll(Duration::ZERO);
                if producer.context().ok.load(Ordering::Acquire) {
                    return Ok(start.elapsed().as_secs_f64());
                }
            }
        }
        bail!("no produce succeeded within the timeout")
    })();
    let _ = std::process::Command::new("kill")
        .arg("-TERM")
        .arg(child.id().to_string())
        .status();
    let _ = child.wait();
    let secs = outcome?;
    Ok(Report {
        label: args.label.clone(),
        mode: "first-produce".into(),
        messages: 1,
        seconds: secs,
        json: args.json,
        ..Report::default()
    })
}
