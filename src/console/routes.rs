//! The console's routes: who is visiting (their session, or the login
//! page), the gRPC call each page or action makes for them, and the page
//! it answers with. See the module docs of `crate::console` for the
//! invariants kept here.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use axum::Router;
use axum::extract::{Form, Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use maud::Markup;
use serde::Deserialize;
use tonic::Code;
use tonic::metadata::MetadataValue;

use super::Console;
use super::pages::{self, Frame};
use super::sessions::Session;
use super::{cluster_pages, schedule_pages};
use crate::model::validate;
use crate::proto::v1 as pb;
use crate::proto::v1::matching_client::MatchingClient;
use crate::proto::v1::scheduler_client::SchedulerClient;
use crate::proto::v1::schedules_client::SchedulesClient;

/// The session cookie's name.
const COOKIE: &str = "fairway_console";

/// Top keys asked of DescribeQueue for the share of dispatch.
const TOP_KEYS: u32 = 20;

/// Dead letters listed on a page.
const DEAD_LETTERS_SHOWN: u32 = 100;

/// Dead letters one redrive puts back per partition.
const REDRIVE_LIMIT: u32 = 1000;

pub(super) fn router(console: Arc<Console>) -> Router {
    Router::new()
        .route("/style.css", get(style))
        .route("/login", get(login_page).post(login))
        .route("/logout", post(logout))
        .route("/", get(queues))
        .route("/queues/{queue}", get(queue))
        .route("/queues/{queue}/task", get(task))
        .route("/queues/{queue}/dead", get(dead_letters))
        .route("/queues/{queue}/{verb}", post(act))
        .route("/schedules", get(schedules))
        .route("/listers", get(listers))
        .route("/nodes", get(nodes))
        .route("/workers", get(workers))
        .layer(middleware::from_fn_with_state(console.clone(), guard))
        .with_state(console)
}

/// Refuses other hosts, and sets the headers every answer carries.
async fn guard(State(console): State<Arc<Console>>, request: Request, next: Next) -> Response {
    let host = request.headers().get(header::HOST).and_then(|h| h.to_str().ok()).unwrap_or("");
    if let Some(hosts) = &console.hosts
        && !hosts.iter().any(|allowed| allowed == host)
    {
        return (StatusCode::MISDIRECTED_REQUEST, format!("this console answers to {}\n", hosts.join(", ")))
            .into_response();
    }
    let mut response = next.run(request).await;
    let headers = response.headers_mut();
    let csp = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'";
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(csp));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.entry(header::CACHE_CONTROL).or_insert(HeaderValue::from_static("no-store"));
    response
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css"), (header::CACHE_CONTROL, "max-age=300")], pages::STYLE).into_response()
}

/// A visitor with a session: its id, what it holds, and the cookie to set
/// when the session is new.
struct Visit {
    id: String,
    session: Session,
    new_cookie: Option<HeaderValue>,
}

fn cookie_of(headers: &HeaderMap) -> Option<String> {
    let cookies = headers.get_all(header::COOKIE).iter().filter_map(|v| v.to_str().ok());
    cookies.flat_map(|v| v.split(';')).find_map(|pair| {
        let (name, value) = pair.trim().split_once('=')?;
        (name == COOKIE).then(|| value.to_owned())
    })
}

/// The session cookie of `id`, sent back over TLS only when `tls`.
fn set_cookie(id: &str, tls: bool) -> HeaderValue {
    let secure = if tls { "; Secure" } else { "" };
    HeaderValue::from_str(&format!("{COOKIE}={id}; Path=/; HttpOnly; SameSite=Strict{secure}"))
        .expect("a hex id makes a valid header")
}

fn to_login() -> Response {
    Redirect::to("/login").into_response()
}

/// Why a visitor gets no page.
enum TurnedAway {
    /// No session that logged in: to the login.
    ToLogin,
    /// An action without a session that may act, or without its form token.
    Refused,
}

impl IntoResponse for TurnedAway {
    fn into_response(self) -> Response {
        match self {
            TurnedAway::ToLogin => to_login(),
            TurnedAway::Refused => {
                (StatusCode::FORBIDDEN, "log in to the console first, and act from its pages\n").into_response()
            }
        }
    }
}

impl Console {
    /// The visitor's session; one is opened for a visitor without one when
    /// the node authenticates no one, else the visitor goes to the login.
    fn visit(&self, headers: &HeaderMap) -> Result<Visit, TurnedAway> {
        let now = self.clock.now_ms();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(id) = cookie_of(headers)
            && let Some(session) = sessions.touch(&id, now)
        {
            if self.authenticates() && session.credential.is_none() {
                return Err(TurnedAway::ToLogin);
            }
            let visit = Visit { id, session: session.clone(), new_cookie: None };
            session.flash = None;
            return Ok(visit);
        }
        if self.authenticates() {
            return Err(TurnedAway::ToLogin);
        }
        let id = sessions.open(rand::random(), now);
        let session = sessions.touch(&id, now).expect("just opened").clone();
        Ok(Visit { new_cookie: Some(set_cookie(&id, self.tls)), id, session })
    }

    /// The visitor's session, for an action: refused (403, nothing done)
    /// without a session that may act, or without its form token.
    fn acting(&self, headers: &HeaderMap, token: &str) -> Result<Visit, TurnedAway> {
        let visit = self.visit(headers).map_err(|_| TurnedAway::Refused)?;
        if visit.new_cookie.is_some() || token.is_empty() || visit.session.form_token != token {
            return Err(TurnedAway::Refused);
        }
        Ok(visit)
    }

    fn flash(&self, id: &str, message: String) {
        let now = self.clock.now_ms();
        let mut sessions = self.sessions.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(session) = sessions.touch(id, now) {
            session.flash = Some(message);
        }
    }

    fn client(&self) -> Result<MatchingClient<tonic::transport::Channel>, tonic::Status> {
        self.peers.client(&self.grpc).map_err(|e| tonic::Status::unavailable(e.to_string()))
    }

    /// The channel to this node, for the scheduling services' clients.
    fn channel(&self) -> Result<tonic::transport::Channel, tonic::Status> {
        self.peers.channel(&self.grpc).map_err(|e| tonic::Status::unavailable(e.to_string()))
    }

    /// `message` as a request of `credential`.
    fn request<T>(message: T, credential: Option<&str>) -> tonic::Request<T> {
        let mut request = tonic::Request::new(message);
        if let Some(value) = credential.and_then(|c| MetadataValue::try_from(format!("Bearer {c}")).ok()) {
            request.metadata_mut().insert("authorization", value);
        }
        request
    }

    /// The page `title` with `body` for `visit`.
    fn page(&self, visit: &Visit, title: &str, body: Markup) -> Response {
        let who = if self.authenticates() { visit.session.who.as_str() } else { "" };
        let frame = Frame { title, who, form_token: &visit.session.form_token, flash: visit.session.flash.as_deref() };
        let mut response = pages::page(&frame, body).into_response();
        if let Some(cookie) = &visit.new_cookie {
            response.headers_mut().insert(header::SET_COOKIE, cookie.clone());
        }
        response
    }

    /// What the node answered instead of a page: a login that no longer
    /// holds goes back to the login; others are shown.
    fn trouble(&self, visit: &Visit, status: tonic::Status) -> Response {
        if status.code() == Code::Unauthenticated {
            self.sessions.lock().unwrap_or_else(|p| p.into_inner()).close(&visit.id);
            return to_login();
        }
        let code = match status.code() {
            Code::NotFound => StatusCode::NOT_FOUND,
            Code::PermissionDenied => StatusCode::FORBIDDEN,
            Code::InvalidArgument => StatusCode::BAD_REQUEST,
            _ => StatusCode::BAD_GATEWAY,
        };
        (code, self.page(visit, "Not shown", pages::trouble(status.message()))).into_response()
    }
}

async fn login_page(State(console): State<Arc<Console>>) -> Response {
    if !console.authenticates() {
        return Redirect::to("/").into_response();
    }
    pages::login(None).into_response()
}

#[derive(Deserialize)]
struct LoginForm {
    credential: String,
}

async fn login(State(console): State<Arc<Console>>, headers: HeaderMap, Form(form): Form<LoginForm>) -> Response {
    let credential = form.credential.trim().to_owned();
    let refused = |message: &str| (StatusCode::UNAUTHORIZED, pages::login(Some(message))).into_response();
    if credential.is_empty() || credential.len() > 16 * 1024 {
        return refused("Give an API key or a JWT.");
    }
    let Some(authenticator) = &console.authenticator else { return Redirect::to("/").into_response() };
    let now = UNIX_EPOCH + Duration::from_millis(console.clock.now_ms().max(0) as u64);
    let principal = match authenticator.authenticate(Some(&credential), None, now) {
        Ok(principal) => principal,
        Err(error) => return refused(&format!("Not a key or token this node accepts: {error}")),
    };
    // A new session on login: an id known before it is worth nothing after.
    let now = console.clock.now_ms();
    let mut sessions = console.sessions.lock().unwrap_or_else(|p| p.into_inner());
    if let Some(old) = cookie_of(&headers) {
        sessions.close(&old);
    }
    let id = sessions.open(rand::random(), now);
    let session = sessions.touch(&id, now).expect("just opened");
    session.who = principal.name.clone();
    session.credential = Some(credential);
    ([(header::SET_COOKIE, set_cookie(&id, console.tls))], Redirect::to("/")).into_response()
}

#[derive(Deserialize)]
struct TokenForm {
    #[serde(default)]
    token: String,
}

async fn logout(State(console): State<Arc<Console>>, headers: HeaderMap, Form(form): Form<TokenForm>) -> Response {
    match console.acting(&headers, &form.token) {
        Ok(visit) => {
            console.sessions.lock().unwrap_or_else(|p| p.into_inner()).close(&visit.id);
            to_login()
        }
        Err(away) => away.into_response(),
    }
}

#[derive(Deserialize)]
struct PageQuery {
    #[serde(default)]
    after: String,
}

async fn queues(State(console): State<Arc<Console>>, headers: HeaderMap, Query(query): Query<PageQuery>) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let request = pb::ListQueuesRequest { page_size: 100, page_token: query.after, prefix: String::new() };
    let answer = match console.client() {
        Ok(mut client) => client.list_queues(Console::request(request, visit.session.credential.as_deref())).await,
        Err(status) => Err(status),
    };
    match answer {
        Ok(listed) => console.page(&visit, "Queues", pages::queues(listed.get_ref(), console.clock.now_ms())),
        Err(status) => console.trouble(&visit, status),
    }
}

/// The queue named in a path, checked as gRPC checks it (so that it can
/// be put back in a link).
fn queue_name(name: &str) -> Result<String, tonic::Status> {
    validate::queue_name("queue", name)
        .map(|q| q.to_string())
        .map_err(|e| tonic::Status::invalid_argument(e.to_string()))
}

#[derive(Deserialize)]
struct QueueQuery {
    /// A purge's token, to ask for its confirmation.
    #[serde(default)]
    purge: String,
}

async fn queue(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(query): Query<QueueQuery>,
) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let described = async {
        let queue = queue_name(&name)?;
        let request = pb::DescribeQueueRequest { queue, top_keys: TOP_KEYS };
        console.client()?.describe_queue(Console::request(request, visit.session.credential.as_deref())).await
    };
    match described.await {
        Ok(described) => {
            let described = described.into_inner();
            let shares = crate::api::dispatch_shares::shares(&described);
            // Read only now that the visitor's DescribeQueue was answered.
            let points = console.history.of(&crate::model::QueueName::new_unchecked(&described.queue));
            let history = (points.as_slice(), console.history.every().as_secs());
            let forms = pages::QueueForms { token: &visit.session.form_token, purge: &query.purge };
            let body = pages::queue(&described, &shares, history, forms, console.clock.now_ms());
            console.page(&visit, &format!("Queue {}", described.queue), body)
        }
        Err(status) => console.trouble(&visit, status),
    }
}

#[derive(Deserialize)]
struct TaskQuery {
    #[serde(default)]
    partition: u32,
    id: i64,
}

async fn task(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(query): Query<TaskQuery>,
) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let credential = visit.session.credential.as_deref();
    let found = async {
        let queue = queue_name(&name)?;
        let mut client = console.client()?;
        let request = |include_payload| pb::GetTaskRequest {
            queue: queue.clone(),
            partition: query.partition,
            task_id: query.id,
            include_payload,
        };
        match client.get_task(Console::request(request(true), credential)).await {
            Ok(found) => Ok((found.into_inner(), false)),
            Err(status) if status.code() == Code::PermissionDenied => {
                let found = client.get_task(Console::request(request(false), credential)).await?;
                Ok((found.into_inner(), true))
            }
            Err(status) => Err(status),
        }
    };
    match found.await {
        Ok((found, hidden)) => {
            let title = format!("Task {} of partition {}", found.task_id, found.partition);
            let body = pages::task(&found, hidden, &name, &visit.session.form_token, console.clock.now_ms());
            console.page(&visit, &title, body)
        }
        Err(status) => console.trouble(&visit, status),
    }
}

#[derive(Deserialize)]
struct SchedulesQuery {
    #[serde(default)]
    health: String,
    #[serde(default)]
    after: String,
}

async fn schedules(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<SchedulesQuery>,
) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let health = schedule_pages::health_filter(&query.health);
    let request = pb::ListSchedulesRequest { health: health.into(), page_size: 100, page_token: query.after };
    let listed = async {
        let mut client = SchedulesClient::new(console.channel()?);
        client.list_schedules(Console::request(request, visit.session.credential.as_deref())).await
    };
    match listed.await {
        Ok(listed) => {
            let body = schedule_pages::schedules(listed.get_ref(), &query.health, console.clock.now_ms());
            console.page(&visit, "Schedules", body)
        }
        Err(status) => console.trouble(&visit, status),
    }
}

#[derive(Deserialize)]
struct ListerQuery {
    #[serde(default)]
    lister: String,
}

async fn listers(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<ListerQuery>,
) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let now = console.clock.now_ms();
    if query.lister.is_empty() {
        return console.page(&visit, "Listers", schedule_pages::listers("", None, now));
    }
    let request = pb::GetListerMetricsRequest { lister: query.lister.clone() };
    let metrics = async {
        let mut client = SchedulerClient::new(console.channel()?);
        client.get_lister_metrics(Console::request(request, visit.session.credential.as_deref())).await
    };
    match metrics.await {
        Ok(metrics) => {
            let body = schedule_pages::listers(&query.lister, Some(metrics.get_ref()), now);
            console.page(&visit, &format!("Lister {}", query.lister), body)
        }
        Err(status) => console.trouble(&visit, status),
    }
}

async fn nodes(State(console): State<Arc<Console>>, headers: HeaderMap) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let listed = async {
        let request = Console::request(pb::ListNodesRequest {}, visit.session.credential.as_deref());
        console.client()?.list_nodes(request).await
    };
    match listed.await {
        Ok(listed) => console.page(&visit, "Nodes", cluster_pages::nodes(listed.get_ref(), console.clock.now_ms())),
        Err(status) => console.trouble(&visit, status),
    }
}

#[derive(Deserialize)]
struct WorkersQuery {
    #[serde(default)]
    queue: String,
}

async fn workers(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Query(query): Query<WorkersQuery>,
) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let listed = async {
        let request = pb::ListWorkersRequest { queue: query.queue.clone() };
        console.client()?.list_workers(Console::request(request, visit.session.credential.as_deref())).await
    };
    match listed.await {
        Ok(listed) => {
            let body = cluster_pages::workers(listed.get_ref(), &query.queue, console.clock.now_ms());
            console.page(&visit, "Workers", body)
        }
        Err(status) => console.trouble(&visit, status),
    }
}

async fn dead_letters(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    Query(chosen): Query<pages::LetterChoice>,
) -> Response {
    let visit = match console.visit(&headers) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let listed = async {
        let queue = queue_name(&name)?;
        let request = pb::ListDeadLettersRequest { queue, limit: DEAD_LETTERS_SHOWN, filter: chosen.filter() };
        console.client()?.list_dead_letters(Console::request(request, visit.session.credential.as_deref())).await
    };
    match listed.await {
        Ok(dead) => {
            let body =
                pages::dead_letters(&name, dead.get_ref(), &chosen, &visit.session.form_token, console.clock.now_ms());
            console.page(&visit, &format!("Dead letters of {name}"), body)
        }
        Err(status) => console.trouble(&visit, status),
    }
}

#[derive(Deserialize)]
struct ActionForm {
    #[serde(default)]
    token: String,
    /// Set when the action is on one key (`key`, which may be empty).
    #[serde(default)]
    one_key: Option<String>,
    #[serde(default)]
    key: String,
    /// A redrive: the letters chosen (see [`pages::LetterChoice`]).
    #[serde(default)]
    contains: String,
    /// A cancel: which task.
    #[serde(default)]
    partition: u32,
    #[serde(default)]
    id: i64,
    /// A purge: the token of the first step (empty on the first step).
    #[serde(default)]
    confirmation: String,
}

async fn act(
    State(console): State<Arc<Console>>,
    headers: HeaderMap,
    Path((name, verb)): Path<(String, String)>,
    Form(form): Form<ActionForm>,
) -> Response {
    let visit = match console.acting(&headers, &form.token) {
        Ok(visit) => visit,
        Err(away) => return away.into_response(),
    };
    let queue = match queue_name(&name) {
        Ok(queue) => queue,
        Err(status) => return console.trouble(&visit, status),
    };
    let key = form.one_key.is_some().then(|| form.key.clone());
    let chosen = pages::LetterChoice { key: form.key.clone(), contains: form.contains.clone() };
    let credential = visit.session.credential.as_deref();
    let what = match &key {
        Some(key) if key.is_empty() => "the empty key".to_owned(),
        Some(key) => format!("key {key:?}"),
        None => format!("queue {queue}"),
    };
    let done = async {
        let mut client = console.client()?;
        let message = match verb.as_str() {
            "pause" => {
                let message = pb::PauseQueueRequest { queue: queue.clone(), fairness_key: key.clone() };
                client.pause_queue(Console::request(message, credential)).await?;
                format!("Paused {what}.")
            }
            "resume" => {
                let message = pb::ResumeQueueRequest { queue: queue.clone(), fairness_key: key.clone() };
                client.resume_queue(Console::request(message, credential)).await?;
                format!("Resumed {what}.")
            }
            "redrive" => {
                let message = pb::RedriveDeadLettersRequest {
                    queue: queue.clone(),
                    limit: REDRIVE_LIMIT,
                    filter: chosen.filter(),
                };
                let done = client.redrive_dead_letters(Console::request(message, credential)).await?.into_inner();
                let more = if done.more { " There may be more: redrive again." } else { "" };
                format!(
                    "Put {} dead letter(s) back in the queue ({} dropped as duplicates).{more}",
                    done.redriven, done.duplicates
                )
            }
            "cancel" => {
                let message =
                    pb::CancelTaskRequest { queue: queue.clone(), partition: form.partition, task_id: form.id };
                let done = client.cancel_task(Console::request(message, credential)).await?.into_inner();
                format!("Cancelled task {} of partition {}: {}.", form.id, form.partition, done.outcome)
            }
            "purge" if form.confirmation.is_empty() => {
                // The first step: the queue page asks again, with the token.
                let message = pb::PurgeQueueRequest { queue: queue.clone(), confirmation: String::new() };
                let asked = client.purge_queue(Console::request(message, credential)).await?.into_inner();
                return Ok((String::new(), format!("/queues/{queue}?purge={}#purge", asked.confirmation)));
            }
            "purge" => {
                let message = pb::PurgeQueueRequest { queue: queue.clone(), confirmation: form.confirmation.clone() };
                let done = client.purge_queue(Console::request(message, credential)).await?.into_inner();
                format!(
                    "Purged queue {queue}: {} waiting, {} delayed and {} running task(s) cancelled.",
                    done.waiting, done.delayed, done.running
                )
            }
            other => return Err(tonic::Status::not_found(format!("no action {other:?}"))),
        };
        let back = if verb == "redrive" { format!("/queues/{queue}/dead") } else { format!("/queues/{queue}") };
        Ok((message, back))
    };
    let (message, back) = match done.await {
        Ok((message, back)) if message.is_empty() => return Redirect::to(&back).into_response(),
        Ok(done) => done,
        Err(status) if status.code() == Code::Unauthenticated => return console.trouble(&visit, status),
        Err(status) => (format!("Not done: {}", status.message()), format!("/queues/{queue}")),
    };
    console.flash(&visit.id, message);
    Redirect::to(&back).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.append(header::COOKIE, HeaderValue::from_static("a=1; fairway_console=abc; b=2"));
        assert_eq!(cookie_of(&headers).as_deref(), Some("abc"));
        let mut other = HeaderMap::new();
        other.append(header::COOKIE, HeaderValue::from_static("fairway_consolex=abc"));
        assert_eq!(cookie_of(&other), None);
    }
}
