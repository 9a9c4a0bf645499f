//! The console's pages, as HTML built from the API's answers. Every value
//! from outside (queue names, keys, messages) goes through maud, which
//! escapes it; no script runs in a page; bars are SVG attributes, so the
//! content security policy allows no inline style or script.

use maud::{DOCTYPE, Markup, html};

use crate::api::dispatch_shares::Shares;
use crate::clock::human::{ms, relative};
use crate::proto::v1 as pb;
use crate::proto::v1::get_task_response::State;

/// "5 min ago" (or "in 3 s"), from `now`.
fn ago(at: &prost_types::Timestamp, now: i64) -> String {
    relative(ms(at), now)
}

/// A local date and how far it is from `now`; "-" when unset.
fn when(at: Option<&prost_types::Timestamp>, now: i64) -> String {
    crate::clock::human::when(at, now)
}

/// The style sheet, served at `/style.css`.
pub(super) const STYLE: &str = include_str!("style.css");

/// What every page shows around its body.
pub(super) struct Frame<'a> {
    /// The page's title.
    pub(super) title: &'a str,
    /// Who is logged in (empty: the node authenticates no one).
    pub(super) who: &'a str,
    /// The token every form of the session carries.
    pub(super) form_token: &'a str,
    /// A message from the last action.
    pub(super) flash: Option<&'a str>,
}

/// A whole page: `body` inside the frame.
pub(super) fn page(frame: &Frame<'_>, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { (frame.title) " · Fairway" }
                link rel="stylesheet" href="/style.css";
            }
            body {
                header {
                    a.brand href="/" { "Fairway" }
                    nav { a href="/" { "Queues" } " " a href="/schedules" { "Schedules" } " " a href="/listers" { "Listers" } " " a href="/workers" { "Workers" } " " a href="/nodes" { "Nodes" } }
                    @if !frame.who.is_empty() {
                        form.logout method="post" action="/logout" {
                            (token(frame.form_token))
                            span { "logged in as " (frame.who) }
                            button type="submit" { "Log out" }
                        }
                    }
                }
                main {
                    @if let Some(flash) = frame.flash {
                        p.flash id="flash" { (flash) }
                    }
                    h1 { (frame.title) }
                    (body)
                }
            }
        }
    }
}

fn token(form_token: &str) -> Markup {
    html! { input type="hidden" name="token" value=(form_token); }
}

/// The login form; `error` says why the last attempt failed.
pub(super) fn login(error: Option<&str>) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                title { "Log in · Fairway" }
                link rel="stylesheet" href="/style.css";
            }
            body {
                main.login {
                    h1 { "Fairway" }
                    @if let Some(error) = error { p.error id="error" { (error) } }
                    form method="post" action="/login" {
                        label for="credential" { "API key or JWT" }
                        input #credential type="password" name="credential" autocomplete="off" required;
                        button #login type="submit" { "Log in" }
                    }
                    p.hint { "The same credential as for gRPC: `fairway auth key create` makes an API key." }
                }
            }
        }
    }
}

/// The queues the caller may read.
pub(super) fn queues(listed: &pb::ListQueuesResponse, now: i64) -> Markup {
    html! {
        @if listed.queues.is_empty() {
            p { "No queue yet (or none you may read). Add a task: " code { "fairway task add --queue jobs" } }
        } @else {
            table #queues {
                thead { tr { th { "Queue" } th.n { "Partitions" } th.n { "Waiting" } th.n { "Running" } th { "Oldest waiting" } th { "Paused" } } }
                tbody {
                    @for q in &listed.queues {
                        tr {
                            td { a href={ "/queues/" (q.queue) } { (q.queue) } }
                            td.n { (q.partitions) }
                            td.n { (q.backlog) }
                            td.n { (q.leased) }
                            td { (q.oldest_added_at.as_ref().map_or("-".to_owned(), |t| ago(t, now))) }
                            td { (paused(q.settings.as_ref())) }
                        }
                    }
                }
            }
            @if !listed.next_page_token.is_empty() {
                p { a href={ "/?after=" (listed.next_page_token) } { "Next page" } }
            }
        }
    }
}

fn paused(settings: Option<&pb::QueueSettings>) -> String {
    match settings {
        Some(s) if s.paused => "the whole queue".to_owned(),
        Some(s) if !s.paused_keys.is_empty() => format!("{} key(s)", s.paused_keys.len()),
        _ => String::new(),
    }
}

/// What the forms of a queue's page carry: the session's token, and a
/// purge's token when the page asks to confirm one.
pub(super) struct QueueForms<'a> {
    pub(super) token: &'a str,
    pub(super) purge: &'a str,
}

/// One queue: what waits and runs, each key's share, partitions, pauses,
/// and the forms of its actions.
pub(super) fn queue(
    described: &pb::DescribeQueueResponse,
    shares: &Shares,
    history: (&[super::history::Point], u64),
    forms: QueueForms<'_>,
    now: i64,
) -> Markup {
    let form_token = forms.token;
    let name = &described.queue;
    let parts = &described.partitions;
    let waiting: u64 = parts.iter().flat_map(|p| &p.subqueues).map(|s| s.backlog).sum();
    let running: u64 = parts.iter().map(|p| p.leased).sum();
    let delayed: u64 = parts.iter().map(|p| p.delayed).sum();
    let settings = described.settings.clone().unwrap_or_default();
    html! {
        p #summary {
            (waiting) " waiting, " (running) " running"
            @if described.held_for_polls > 0 { " (" (described.held_for_polls) " held here for the next poll)" }
            ", " (delayed) " delayed, in " (parts.len()) " partition(s); "
            (described.waiting_pollers) " poll(s) waiting here. "
            a href={ "/queues/" (name) "/dead" } { "Dead letters" } " · "
            a #queue-workers href={ "/workers?queue=" (name) } { "Workers" }
        }
        h2 { "The last hour on this node" }
        (super::charts::last_hour(history.0, history.1, now))
        h2 { "Share of dispatch" }
        @if shares.keys.is_empty() {
            p #no-shares { "Nothing handed out in the last seconds by the partitions this node holds." }
        } @else {
            p.hint { "Over the last " (format!("{:.1}", shares.span_s)) " s: each key's share of the cost handed out (bar), and its target: its weight over the weights of the keys listed (line)." }
            table #shares {
                thead { tr { th { "Key" } th.n { "Tasks" } th.n { "Share" } th { "" } th.n { "Target" } } }
                tbody {
                    @for s in &shares.keys {
                        tr data-key=(s.key) {
                            td { (key_label(&s.key)) }
                            td.n { (s.tasks) }
                            td.n.share { (format!("{:.1}%", s.share)) }
                            td { (bar(s.share, s.target)) }
                            td.n { (format!("{:.1}%", s.target)) }
                        }
                    }
                }
            }
        }
        h2 { "Pauses" }
        @if settings.paused {
            p #queue-paused { "The whole queue is paused." }
            (action(name, "resume", form_token, None, "Resume the queue"))
        } @else {
            (action(name, "pause", form_token, None, "Pause the whole queue"))
        }
        @if !settings.paused_keys.is_empty() {
            table #paused-keys {
                tbody {
                    @for key in &settings.paused_keys {
                        tr { td { (key_label(key)) } td { (action(name, "resume", form_token, Some(key), "Resume")) } }
                    }
                }
            }
        }
        form #pause-key method="post" action={ "/queues/" (name) "/pause" } {
            (token(form_token))
            input type="hidden" name="one_key" value="yes";
            label for="key" { "Pause one key" }
            input #key type="text" name="key" placeholder="fairness key";
            button type="submit" { "Pause" }
        }
        h2 #purge { "Purge" }
        @if forms.purge.is_empty() {
            p.hint { "Cancels every task of the queue but its dead letters: waiting, delayed and running. Asks first." }
            div #purge-ask { (action(name, "purge", form_token, None, "Purge the queue…")) }
        } @else {
            div #confirm-purge {
                p { "Cancel every task of queue " strong { (name) } ": about " (waiting) " waiting, " (delayed) " delayed and "
                    (running) " running? Running tasks' workers are told at their next heartbeat. Dead letters stay. This cannot be undone." }
                form.action method="post" action={ "/queues/" (name) "/purge" } {
                    (token(form_token))
                    input type="hidden" name="confirmation" value=(forms.purge);
                    button.danger type="submit" { "Yes, purge queue " (name) }
                }
                a href={ "/queues/" (name) } { "Keep it" }
            }
        }
        h2 { "Find a task" }
        form #find-task method="get" action={ "/queues/" (name) "/task" } {
            label for="partition" { "Partition" }
            input #partition type="number" name="partition" min="0" value="0";
            label for="task_id" { "Task id" }
            input #task_id type="number" name="id" min="1" required;
            button type="submit" { "Show" }
        }
        h2 { "Partitions" }
        table #partitions {
            thead { tr { th.n { "Partition" } th { "Owner" } th { "State" } th.n { "Waiting" } th.n { "Running" } th.n { "Delayed" } th.n { "Handed out" } th { "Oldest waiting" } } }
            tbody {
                @for p in parts {
                    @let oldest = p.subqueues.iter().filter_map(|s| s.oldest_added_at.as_ref()).min_by_key(|t| (t.seconds, t.nanos));
                    tr {
                        td.n { (p.partition) }
                        td { (p.owner) }
                        td { (p.state) }
                        td.n { (p.subqueues.iter().map(|s| s.backlog).sum::<u64>()) }
                        td.n { (p.leased) }
                        td.n { (p.delayed) }
                        td.n { (p.dispatched) }
                        td { (oldest.map_or("-".to_owned(), |t| ago(t, now))) }
                    }
                }
            }
        }
    }
}

fn key_label(key: &str) -> Markup {
    html! {
        @if key.is_empty() { em { "(the empty key)" } } @else { code { (key) } }
    }
}

/// A bar of `share` percent with a line at `target` percent.
fn bar(share: f64, target: f64) -> Markup {
    let clamp = |v: f64| v.clamp(0.0, 100.0);
    html! {
        svg.bar width="200" height="14" viewBox="0 0 100 14" preserveAspectRatio="none" role="img" {
            rect.track x="0" y="2" width="100" height="10" {}
            rect.fill x="0" y="2" width=(format!("{:.2}", clamp(share))) height="10" {}
            rect.target x=(format!("{:.2}", clamp(target) - 0.5)) y="0" width="1" height="14" {}
        }
    }
}

/// A form that posts one action on `queue` (`pause`, `resume`,
/// `redrive`), for one key or the whole queue.
fn action(queue: &str, verb: &str, form_token: &str, key: Option<&str>, label: &str) -> Markup {
    html! {
        form.action method="post" action={ "/queues/" (queue) "/" (verb) } {
            (token(form_token))
            @if let Some(key) = key {
                input type="hidden" name="one_key" value="yes";
                input type="hidden" name="key" value=(key);
            }
            button type="submit" { (label) }
        }
    }
}

/// One task; `payload` when the caller may see it; a form that cancels it.
pub(super) fn task(
    task: &pb::GetTaskResponse,
    payload_hidden: bool,
    queue: &str,
    form_token: &str,
    now: i64,
) -> Markup {
    let state = match task.state() {
        State::Pending => format!("pending: waiting for {}", task.waiting_for),
        State::Delayed => format!("delayed: ready {}", when(task.ready_at.as_ref(), now)),
        State::Leased if task.worker_id.is_empty() => {
            format!("leased (by an earlier owner of the partition) until {}", when(task.lease_deadline.as_ref(), now))
        }
        State::Leased => format!("leased to {} until {}", task.worker_id, when(task.lease_deadline.as_ref(), now)),
        State::Dead => format!("dead since {}: {}", when(task.failed_at.as_ref(), now), task.failure_message),
        State::Unspecified => "in a state this console does not know".to_owned(),
    };
    html! {
        p #task-state.state { (state) }
        @if task.cancelled {
            p #task-cancelled.state { "Cancelled: it ends, completed and never delivered, when it comes up." }
        } @else {
            form.action #cancel method="post" action={ "/queues/" (queue) "/cancel" } {
                (token(form_token))
                input type="hidden" name="partition" value=(task.partition);
                input type="hidden" name="id" value=(task.task_id);
                button type="submit" { "Cancel this task" }
            }
        }
        table.fields {
            tbody {
                tr { th { "Queue" } td { a href={ "/queues/" (queue) } { (queue) } } }
                tr { th { "Partition, id" } td { (task.partition) ", " (task.task_id) } }
                tr { th { "Fairness key" } td { (key_label(&task.fairness_key)) } }
                tr { th { "Priority" } td { (task.priority) } }
                tr { th { "Attempt" } td { (task.attempt) } }
                tr { th { "Added" } td { (when(task.created_at.as_ref(), now)) } }
                @if task.deadline.is_some() { tr { th { "Deadline" } td { (when(task.deadline.as_ref(), now)) } } }
                @if !task.dedup_id.is_empty() { tr { th { "Dedup id" } td { code { (task.dedup_id) } } } }
                tr { th { "Cost" } td { (task.cost) @if task.size > 0 { " (size " (task.size) ")" } } }
                tr {
                    th { "Payload" }
                    td #payload {
                        @if payload_hidden {
                            (task.payload_bytes) " bytes, hidden: payloads are shown to the admin and worker roles"
                        } @else {
                            pre { (String::from_utf8_lossy(&task.payload)) }
                        }
                    }
                }
            }
        }
    }
}

/// The dead letters of a queue that `chosen` chooses, oldest first; a form
/// that chooses, and one that redrives those chosen.
pub(super) fn dead_letters(
    queue: &str,
    dead: &pb::ListDeadLettersResponse,
    chosen: &LetterChoice,
    form_token: &str,
    now: i64,
) -> Markup {
    let choosing = !chosen.key.is_empty() || !chosen.contains.is_empty();
    html! {
        form.choose #choose-letters method="get" action={ "/queues/" (queue) "/dead" } {
            label { "Key " input type="text" name="key" value=(chosen.key); }
            label { "Message contains " input type="text" name="contains" value=(chosen.contains); }
            button type="submit" { "Show" }
        }
        @if dead.dead_letters.is_empty() {
            p #no-dead-letters { "No dead letters" @if choosing { " of this choice" } "." }
        } @else {
            form.action method="post" action={ "/queues/" (queue) "/redrive" } {
                (token(form_token))
                input type="hidden" name="key" value=(chosen.key);
                input type="hidden" name="contains" value=(chosen.contains);
                button type="submit" { @if choosing { "Redrive these" } @else { "Redrive all" } }
            }
            @if dead.more { p.note { "There may be more than those shown." } }
            table #dead-letters {
                thead { tr { th { "Task" } th { "Key" } th.n { "Attempts" } th { "Failed" } th { "Why" } } }
                tbody {
                    @for d in &dead.dead_letters {
                        tr {
                            td { (d.partition) "/" (d.task_id) }
                            td { (key_label(&d.fairness_key)) }
                            td.n { (d.attempts) }
                            td { (when(d.failed_at.as_ref(), now)) }
                            td { (d.message) }
                        }
                    }
                }
            }
        }
    }
}

/// Which dead letters a page shows: those of a key (empty: any key), whose
/// message contains some text (empty: any).
#[derive(Debug, Default, serde::Deserialize)]
pub(super) struct LetterChoice {
    #[serde(default)]
    pub key: String,
    #[serde(default)]
    pub contains: String,
}

impl LetterChoice {
    /// The filter to send: none when nothing is chosen. The console names
    /// a key only when one is typed, so the empty key is not chosen here.
    pub(super) fn filter(&self) -> Option<pb::DeadLetterFilter> {
        if self.key.is_empty() && self.contains.is_empty() {
            return None;
        }
        Some(pb::DeadLetterFilter {
            fairness_key: (!self.key.is_empty()).then(|| self.key.clone()),
            message_contains: self.contains.clone(),
            ..pb::DeadLetterFilter::default()
        })
    }
}

/// A page that could not be shown: what the node answered.
pub(super) fn trouble(message: &str) -> Markup {
    html! { p.error #error { (message) } p { a href="/" { "Back to the queues" } } }
}
