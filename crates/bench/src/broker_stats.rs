//! The broker's CPU seconds and memory, read from /proc (Linux only; absent elsewhere).

/// Clock ticks per second of `/proc/<pid>/stat` times (USER_HZ, 100 on Linux).
const USER_HZ: f64 = 100.0;

#[derive(Debug, Clone, Copy, Default)]
pub struct Sample {
    /// user + system CPU seconds so far.
    pub cpu_seconds: f64,
    /// Resident set size now, bytes.
    pub rss_bytes: u64,
    /// Peak resident set size since the process started (VmHWM), bytes.
    pub peak_rss_bytes: u64,
}

pub fn sample(pid: u32) -> Option<Sample> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = stat.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let utime: f64 = fields.get(11)?.parse().ok()?;
    let stime: f64 = fields.get(12)?.parse().ok()?;
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    let kb = |key: &str| -> u64 {
        status
            .lines()
            .find(|l| l.starts_with(key))
            .and_then(|l| l.split_whitespace().nth(1))
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(0)
            * 1024
    };
    Some(Sample {
        cpu_seconds: (utime + stime) / USER_HZ,
        rss_bytes: kb("VmRSS:"),
        peak_rss_bytes: kb("VmHWM:"),
    })
}
