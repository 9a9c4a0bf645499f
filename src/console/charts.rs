//! The charts of a queue's last hour, drawn as inline SVG from the
//! [`History`](super::history::History) points: tasks added and handed out
//! per second, and tasks waiting and running. No script, no inline style:
//! colours come from the stylesheet by class.

use maud::{Markup, html};

use super::history::Point;

const WIDTH: f64 = 600.0;
const HEIGHT: f64 = 130.0;
/// Room on the left for the scale, and at the bottom for the times.
const LEFT: f64 = 44.0;
const BOTTOM: f64 = 18.0;
const TOP: f64 = 6.0;
const SPAN_MS: i64 = 3_600_000;

/// One series: its CSS class, its name in the legend, and its values.
struct Series {
    class: &'static str,
    name: &'static str,
    values: Vec<(i64, f64)>,
}

/// Both charts, or a word on why there are none yet.
pub(super) fn last_hour(points: &[Point], every_s: u64, now: i64) -> Markup {
    if points.len() < 2 {
        return html! {
            p #no-charts.hint {
                "The charts fill in as this node reads its counters (every " (every_s) " s); come back in a moment."
            }
        };
    }
    let rate = |count: fn(&Point) -> u64| {
        points
            .windows(2)
            .map(|w| {
                let seconds = ((w[1].at - w[0].at) as f64 / 1000.0).max(0.001);
                (w[1].at, count(&w[1]).saturating_sub(count(&w[0])) as f64 / seconds)
            })
            .collect()
    };
    let level = |value: fn(&Point) -> u64| points.iter().map(|p| (p.at, value(p) as f64)).collect();
    let throughput = [
        Series { class: "added", name: "added", values: rate(|p| p.added) },
        Series { class: "dispatched", name: "handed out", values: rate(|p| p.dispatched) },
        Series { class: "failed", name: "failed", values: rate(|p| p.failed) },
    ];
    let depth = [
        Series { class: "backlog", name: "waiting", values: level(|p| p.backlog) },
        Series { class: "leased", name: "running", values: level(|p| p.leased) },
    ];
    // The time axis spans what was read, up to the hour: a node just
    // started shows its first minutes across the whole width.
    let span = (now - points[0].at).clamp(10_000, SPAN_MS);
    html! {
        div #charts {
            (chart("chart-rates", "Tasks per second", &throughput, now, span))
            (chart("chart-depth", "Tasks waiting and running", &depth, now, span))
        }
    }
}

fn chart(id: &str, title: &str, series: &[Series], now: i64, span: i64) -> Markup {
    let top = series.iter().flat_map(|s| s.values.iter().map(|(_, v)| *v)).fold(0.0, f64::max);
    let scale = nice_ceiling(top);
    let x = |at: i64| LEFT + (WIDTH - LEFT) * (1.0 - (now - at).clamp(0, span) as f64 / span as f64);
    let ago = |ms: i64| format!("{} ago", crate::clock::human::span(ms));
    let y = |value: f64| TOP + (HEIGHT - BOTTOM - TOP) * (1.0 - value / scale);
    let line = |values: &[(i64, f64)]| {
        values.iter().map(|(at, v)| format!("{:.1},{:.1}", x(*at), y(*v))).collect::<Vec<_>>().join(" ")
    };
    html! {
        figure.chart id=(id) {
            figcaption {
                (title) " — "
                @for s in series { span class={ "key " (s.class) } { (s.name) } " " }
            }
            svg viewBox={ "0 0 " (WIDTH) " " (HEIGHT) } role="img" aria-label=(title) {
                line.axis x1=(LEFT) y1=(y(0.0)) x2=(WIDTH) y2=(y(0.0)) {}
                line.grid x1=(LEFT) y1=(y(scale)) x2=(WIDTH) y2=(y(scale)) {}
                text.scale x=(LEFT - 4.0) y=(y(scale) + 4.0) { (number(scale)) }
                text.scale x=(LEFT - 4.0) y=(y(0.0) + 4.0) { "0" }
                text.time.first x=(x(now - span)) y=(HEIGHT - 4.0) { (ago(span)) }
                text.time x=(x(now - span / 2)) y=(HEIGHT - 4.0) { (ago(span / 2)) }
                text.time.last x=(WIDTH) y=(HEIGHT - 4.0) { "now" }
                @for s in series {
                    polyline class={ "series " (s.class) } points=(line(&s.values)) {}
                }
            }
        }
    }
}

/// The smallest of 1, 2 or 5 times a power of ten at or above `value` (1 at least).
fn nice_ceiling(value: f64) -> f64 {
    if value <= 1.0 {
        return 1.0;
    }
    let power = 10f64.powf(value.log10().floor());
    [1.0, 2.0, 5.0, 10.0].into_iter().map(|m| m * power).find(|nice| *nice >= value).unwrap_or(10.0 * power)
}

fn number(value: f64) -> String {
    if value >= 10_000.0 { format!("{:.0}k", value / 1000.0) } else { format!("{value:.0}") }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scales_are_round_numbers_above_the_top() {
        assert_eq!(nice_ceiling(0.0), 1.0);
        assert_eq!(nice_ceiling(1.5), 2.0);
        assert_eq!(nice_ceiling(3.0), 5.0);
        assert_eq!(nice_ceiling(7.0), 10.0);
        assert_eq!(nice_ceiling(10.0), 10.0);
        assert_eq!(nice_ceiling(420.0), 500.0);
        assert_eq!(number(20_000.0), "20k");
    }

    #[test]
    fn rates_come_from_the_counts_between_readings() {
        let at = |s: i64, added: u64| Point { at: s * 1000, added, ..Point::default() };
        let points = [at(0, 0), at(10, 50), at(20, 50)];
        let page = last_hour(&points, 10, 20_000).into_string();
        assert!(page.contains("id=\"chart-rates\""), "{page}");
        // 5 per second then none: the scale is 5, the line falls to the axis.
        assert!(page.contains(">5</text>"), "{page}");
        assert!(last_hour(&points[..1], 10, 0).into_string().contains("no-charts"));
    }
}
