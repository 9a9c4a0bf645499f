//! What the tools that measure (`fairway-lab bench`, `fairway-lab simulate`) share:
//! statistics, PNG charts, a progress line, numbers as tables show them,
//! and the machine they ran on.

pub(crate) mod plot;
pub(crate) mod progress;
pub(crate) mod stats;

/// A number as a table shows it: integers with thousands separators, small
/// values with three significant decimals.
pub(crate) fn number(value: f64) -> String {
    if value.abs() >= 100.0 {
        let rounded = value.round() as i64;
        let digits = rounded.unsigned_abs().to_string();
        let mut grouped = String::new();
        for (i, c) in digits.chars().enumerate() {
            if i > 0 && (digits.len() - i).is_multiple_of(3) {
                grouped.push(',');
            }
            grouped.push(c);
        }
        if rounded < 0 { format!("-{grouped}") } else { grouped }
    } else if value == value.trunc() {
        format!("{value:.0}")
    } else {
        format!("{value:.3}")
    }
}

/// This machine as a report names it: system, architecture, cores, memory.
pub(crate) fn machine() -> String {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| m.lines().next().map(|l| l.split_whitespace().nth(1).unwrap_or("0").to_owned()))
        .and_then(|kb| kb.parse::<u64>().ok())
        .map_or("?".to_owned(), |kb| format!("{} GiB", kb.div_ceil(1024 * 1024)));
    format!("{} {}, {cores} cores, {memory}", std::env::consts::OS, std::env::consts::ARCH)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_are_grouped_or_given_three_decimals() {
        assert_eq!(number(1_234_567.4), "1,234,567");
        assert_eq!(number(-1234.0), "-1,234");
        assert_eq!(number(0.98765), "0.988");
        assert_eq!(number(12.0), "12");
    }
}
