//! The console's pages of the scheduling side: recurring schedules with
//! their health, and one lister's origins with coverage and lag.

use maud::{Markup, html};

use crate::clock::human::{relative, when};
use crate::proto::v1 as pb;
use crate::schedules::described::{cadence, health_name};

/// The health filters of the schedules page, as links: (query value, label).
const HEALTH_FILTERS: [(&str, &str); 4] = [("", "All"), ("error", "Error"), ("warning", "Warning"), ("ok", "OK")];

/// The `Health` a filter of the schedules page names; unspecified for all.
pub(super) fn health_filter(name: &str) -> pb::Health {
    match name {
        "error" => pb::Health::Error,
        "warning" => pb::Health::Warning,
        "ok" => pb::Health::Ok,
        _ => pb::Health::Unspecified,
    }
}

/// Schedules, with their health and why, their cadence, the runs in
/// flight and when the last good one ended.
pub(super) fn schedules(listed: &pb::ListSchedulesResponse, filter: &str, now: i64) -> Markup {
    html! {
        p #health-filters {
            "Show: "
            @for (value, label) in HEALTH_FILTERS {
                @if value == filter { strong { (label) } } @else { a href={ "/schedules?health=" (value) } { (label) } }
                " "
            }
        }
        @if listed.schedules.is_empty() {
            p #no-schedules { "No schedule here (or none you may read). Create one: " code { "fairway schedule create --help" } }
        } @else {
            table #schedules {
                thead { tr { th { "Schedule" } th { "Health" } th { "Cadence" } th { "Queue" } th.n { "Running" } th { "Last good end" } th { "Start the next by" } } }
                tbody {
                    @for s in &listed.schedules {
                        @let health = health_name(s.health);
                        tr data-id=(s.id) {
                            td { code { (s.id) } @if s.paused { " " em { "paused" } } }
                            td { span class={ "health " (health.to_lowercase()) } { (health) } " " (s.health_reason) }
                            td { (cadence(s.spec.as_ref())) }
                            td { a href={ "/queues/" (s.template.as_ref().map_or("", |t| t.queue.as_str())) } { (s.template.as_ref().map_or("", |t| t.queue.as_str())) } }
                            td.n { (s.runs.len()) }
                            td { (when(s.last_good_end.as_ref(), now)) }
                            td { (when(s.should_start_by.as_ref(), now)) }
                        }
                    }
                }
            }
            @if !listed.next_page_token.is_empty() {
                p { a href={ "/schedules?health=" (filter) "&after=" (listed.next_page_token) } { "Next page" } }
            }
        }
    }
}

/// The form that names a lister, and its origins by visit type when one is named.
pub(super) fn listers(lister: &str, metrics: Option<&pb::GetListerMetricsResponse>, now: i64) -> Markup {
    html! {
        form #find-lister method="get" action="/listers" {
            label for="lister" { "Lister" }
            input #lister type="text" name="lister" value=(lister) placeholder="e.g. github" required;
            button type="submit" { "Show" }
        }
        @if let Some(metrics) = metrics {
            p #listing {
                "Lister " code { (lister) } " last finished a listing: "
                (metrics.listing_finished.as_ref().map_or("never".to_owned(), |t| when(Some(t), now)))
                "."
            }
            @if metrics.metrics.is_empty() {
                p #no-origins { "It has recorded no origin." }
            } @else {
                p.hint { "Coverage: the enabled origins visited well at least once. Lag: the mean age of the changes the lister reported that no visit has picked up yet." }
                table #lister-metrics {
                    thead { tr { th { "Visit type" } th.n { "Known" } th.n { "Enabled" } th.n { "Coverage" } th.n { "Changes waiting" } th { "Lag" } th.n { "Updates expected" } } }
                    tbody {
                        @for m in &metrics.metrics {
                            tr {
                                td { code { (m.visit_type) } }
                                td.n { (m.known) }
                                td.n { (m.enabled) }
                                td.n.coverage { (coverage(m)) }
                                td.n { (m.pending_changes) }
                                td { (lag(m.pending_lag_seconds)) }
                                td.n { (format!("{:.1}", m.estimated_pending_updates)) }
                            }
                        }
                    }
                }
            }
        }
    }
}

/// The enabled origins visited well at least once, in percent.
fn coverage(m: &pb::ListerMetrics) -> String {
    if m.enabled <= 0 {
        return "-".to_owned();
    }
    let covered = (m.enabled - m.never_visited).max(0);
    format!("{:.1}%", 100.0 * covered as f64 / m.enabled as f64)
}

fn lag(seconds: i64) -> String {
    if seconds <= 0 { "none".to_owned() } else { relative(0, seconds.saturating_mul(1000)).replace(" ago", "") }
}
