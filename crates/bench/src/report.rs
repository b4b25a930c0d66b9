//! What a run measured, printed for people or as one JSON line.

use hdrhistogram::Histogram;
use serde::Serialize;

/// Latency percentiles in milliseconds.
#[derive(Debug, Clone, Serialize, Default)]
pub struct Latency {
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub samples: u64,
}

impl Latency {
    /// From a histogram recorded in microseconds.
    pub fn from_histogram(h: &Histogram<u64>) -> Self {
        let ms = |us: u64| us as f64 / 1000.0;
        Self {
            p50_ms: ms(h.value_at_quantile(0.50)),
            p99_ms: ms(h.value_at_quantile(0.99)),
            p999_ms: ms(h.value_at_quantile(0.999)),
            max_ms: ms(h.max()),
            samples: h.len(),
        }
    }
}

#[derive(Debug, Clone, Serialize, Default)]
pub struct Report {
    pub label: String,
    pub mode: String,
    pub messages: u64,
    pub bytes: u64,
    pub seconds: f64,
    pub mb_per_s: f64,
    pub msgs_per_s: f64,
    pub latency: Option<Latency>,
    pub errors: u64,
    pub broker_cpu_seconds: Option<f64>,
    pub broker_peak_rss_mb: Option<f64>,
    pub broker_rss_mb: Option<f64>,
    /// With `--prime`: from the CreateTopics request until every partition acknowledged a write.
    pub topic_ready_seconds: Option<f64>,
    /// `trickle`: Fetch requests the consumer sent per second (librdkafka's own count).
    pub fetch_requests_per_s: Option<f64>,
    #[serde(skip)]
    pub json: bool,
}

impl Report {
    pub fn finish_rates(&mut self) {
        if self.seconds > 0.0 {
            self.mb_per_s = self.bytes as f64 / 1e6 / self.seconds;
            self.msgs_per_s = self.messages as f64 / self.seconds;
        }
    }

    pub fn print(&self) {
        if self.json {
            match serde_json::to_string(self) {
                Ok(line) => println!("{line}"),
                Err(e) => eprintln!("cannot encode report: {e}"),
            }
            return;
        }
        println!(
            "{} {}: {} msgs, {:.1} MB in {:.2} s = {:.1} MB/s, {:.0} msgs/s, {} errors",
            self.label,
            self.mode,
            self.messages,
            self.bytes as f64 / 1e6,
            self.seconds,
            self.mb_per_s,
            self.msgs_per_s,
            self.errors
        );
        if let Some(l) = &self.latency {
            println!(
                "  latency ms: p50 {:.2}  p99 {:.2}  p99.9 {:.2}  max {:.2}  ({} samples)",
                l.p50_ms, l.p99_ms, l.p999_ms, l.max_ms, l.samples
            );
        }
        if let (Some(cpu), Some(peak)) = (self.broker_cpu_seconds, self.broker_peak_rss_mb) {
            println!("  broker: {cpu:.2} CPU s, peak RSS {peak:.1} MB");
        }
    }
}

/// A progress line on stderr, only when stderr is a terminal.
pub fn progress(done: u64, total: Option<u64>, mb: f64, seconds: f64) {
    use std::io::IsTerminal;
    if !std::io::stderr().is_terminal() {
        return;
    }
    let rate = if seconds > 0.0 { mb / seconds } else { 0.0 };
    match total {
        Some(t) if t > 0 => {
            let width = 30usize;
            let filled = ((done as f64 / t as f64) * width as f64) as usize;
            eprint!(
                "\r[{}{}] {done}/{t} {rate:.1} MB/s ",
                "#".repeat(filled.min(width)),
                " ".repeat(width - filled.min(width))
            );
        }
        _ => eprint!("\r{done} msgs {rate:.1} MB/s "),
    }
}
