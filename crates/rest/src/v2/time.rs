//! Timestamps as the REST APIs write them: RFC 3339 / ISO-8601 date-times
//! (`2024-01-31T12:00:00.123Z`, `…+02:00`), read into and written from Kafka's milliseconds since
//! the Unix epoch. (v2's seek by timestamp, v3's produce.)

/// Days from 1970-01-01 to `year-month-day` in the proleptic Gregorian calendar.
fn days_from_civil(year: i64, month: u32, day: u32) -> i64 {
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let m = i64::from(month);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(day) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// `year-month-day` of the day `days` after 1970-01-01.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

fn digits(s: &str) -> Option<u32> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn days_in_month(year: i64, month: u32) -> u32 {
    match month {
        1 | 3 | 5 | 7 | 8 | 10 | 12 => 31,
        4 | 6 | 9 | 11 => 30,
        _ if (year % 4 == 0 && year % 100 != 0) || year % 400 == 0 => 29,
        _ => 28,
    }
}

/// Milliseconds since the epoch of an RFC 3339 date-time (`T` or a space between date and time,
/// `Z` or an offset, up to nanoseconds — digits past the millisecond are dropped); `None` when
/// it is not one.
pub fn parse_rfc3339(text: &str) -> Option<i64> {
    let text = text.trim();
    let (date, rest) = text.split_at_checked(10)?;
    let rest = rest.strip_prefix(['T', 't', ' '])?;
    let mut parts = date.split('-');
    let year = i64::from(digits(parts.next()?)?);
    let month = digits(parts.next()?)?;
    let day = digits(parts.next()?)?;
    if parts.next().is_some() || !(1..=12).contains(&month) {
        return None;
    }
    if day == 0 || day > days_in_month(year, month) {
        return None;
    }
    // The zone: Z, or ±hh:mm at the end.
    let (clock, offset_minutes) = if let Some(clock) = rest.strip_suffix(['Z', 'z']) {
        (clock, 0i64)
    } else {
        let cut = rest.len().checked_sub(6)?;
        let (clock, zone) = rest.split_at_checked(cut)?;
        let sign = match zone.as_bytes().first()? {
            b'+' => 1,
            b'-' => -1,
            _ => return None,
        };
        let (hours, minutes) = zone.get(1..)?.split_once(':')?;
        let (hours, minutes) = (digits(hours)?, digits(minutes)?);
        if hours > 23 || minutes > 59 {
            return None;
        }
        (clock, sign * i64::from(hours * 60 + minutes))
    };
    let (hms, fraction) = match clock.split_once('.') {
        Some((hms, fraction)) => (hms, Some(fraction)),
        None => (clock, None),
    };
    let mut hms = hms.split(':');
    let hour = digits(hms.next()?)?;
    let minute = digits(hms.next()?)?;
    let second = digits(hms.next()?)?;
    if hms.next().is_some() || hour > 23 || minute > 59 || second > 60 {
        return None;
    }
    let millis = match fraction {
        None => 0,
        Some(f) if !f.is_empty() && f.len() <= 9 && f.bytes().all(|b| b.is_ascii_digit()) => {
            let padded = format!("{f:0<3}");
            i64::from(digits(&padded[..3])?)
        }
        Some(_) => return None,
    };
    let days = days_from_civil(year, month, day);
    let seconds =
        days * 86_400 + i64::from(hour * 3600 + minute * 60 + second) - offset_minutes * 60;
    seconds.checked_mul(1000)?.checked_add(millis)
}

/// `ms` since the epoch as an RFC 3339 date-time in UTC with milliseconds.
pub fn format_rfc3339(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    let (hour, minute) = (in_day / 3_600_000, in_day / 60_000 % 60);
    let (second, millis) = (in_day / 1000 % 60, in_day % 1000);
    format!("{year:04}-{month:02}-{day:02}T{hour:02}:{minute:02}:{second:02}.{millis:03}Z")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(text: &str, expected: Option<i64>) {
        assert_eq!(parse_rfc3339(text), expected, "{text}");
    }

    #[test]
    fn date_times_read_as_kafka_timestamps() {
        check("1970-01-01T00:00:00Z", Some(0));
        check("2021-03-04T05:06:07.089Z", Some(1_614_834_367_089));
        check("2021-03-04T07:06:07.089+02:00", Some(1_614_834_367_089));
        check("2021-03-04T05:06:07.089123456Z", Some(1_614_834_367_089));
        check("2024-02-29T00:00:00Z", Some(1_709_164_800_000));
        check("1969-12-31T23:59:59.999Z", Some(-1));
        check("2023-02-29T00:00:00Z", None);
        check("2021-03-04", None);
        check("2021-03-04T05:06:07", None);
        check("2021-13-04T05:06:07Z", None);
        check("yesterday", None);
        check("2021-03-04T05:06:07.Z", None);
    }

    #[test]
    fn timestamps_write_back_as_they_read() {
        for ms in [
            0,
            1_614_834_367_089,
            1_709_164_800_000,
            -1,
            253_402_300_799_999,
        ] {
            assert_eq!(parse_rfc3339(&format_rfc3339(ms)), Some(ms), "{ms}");
        }
        assert_eq!(
            format_rfc3339(1_614_834_367_089),
            "2021-03-04T05:06:07.089Z"
        );
    }
}
