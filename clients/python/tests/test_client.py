"""Every client call against a real server, through Client and AsyncClient."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest

import fairway


class AsyncAsSync:
    """Drives an AsyncClient from a test body written once for both clients."""

    def __init__(self, address: str, **kwargs) -> None:
        self.loop = asyncio.new_event_loop()

        async def make() -> fairway.AsyncClient:
            return fairway.AsyncClient(address, **kwargs)

        self.inner = self.loop.run_until_complete(make())

    def __getattr__(self, name):
        method = getattr(self.inner, name)

        def call(*args, **kwargs):
            return self.loop.run_until_complete(method(*args, **kwargs))

        return call

    def close(self) -> None:
        self.loop.run_until_complete(self.inner.close())
        self.loop.close()


@pytest.fixture(params=["sync", "async"])
def api(request, server):
    if request.param == "sync":
        c = fairway.Client(server.address)
    else:
        c = AsyncAsSync(server.address)
    yield c
    c.close()


def test_add_poll_heartbeat_complete(api, queue_name):
    queue = queue_name()
    created = api.create_queue(queue, 2)
    assert created.partitions == 2
    added = api.add(queue, "hello", fairness_key="tenant-a", priority=2, weight=2.0)
    assert added.task_id > 0 and not added.duplicate
    task = api.poll(queue, wait=5)
    assert task is not None
    assert (task.task_id, task.payload, task.fairness_key, task.priority, task.attempt) == (
        added.task_id,
        b"hello",
        "tenant-a",
        2,
        1,
    )
    assert task.lease_deadline is not None and task.lease_deadline > dt.datetime.now(dt.timezone.utc)
    extended = api.heartbeat(task)
    assert extended >= task.lease_deadline - dt.timedelta(seconds=1)
    api.complete(task, b"done")
    info = api.describe_queue(queue)
    assert info.partitions == 2 and info.completed == 1 and info.leased == 0 and info.backlog == 0
    assert info.oldest_waiting_since is None, info
    assert api.poll(queue, wait=0.2) is None, "a completed task is never delivered again"
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=1)
    api.add(queue, "waits")
    info = api.describe_queue(queue)
    assert info.oldest_waiting_since is not None and info.oldest_waiting_since >= before, info
    assert info.tasks_over_max_wait == 0, "the queue has no max_wait"


def test_a_task_is_named_by_its_partition_and_id(api, queue_name):
    queue = queue_name()
    api.create_queue(queue, partitions=4)
    added = [api.add(queue, b"x", fairness_key=f"k{i}") for i in range(8)]
    names = {(a.partition, a.task_id) for a in added}
    assert len(names) == 8 and {a.partition for a in added} <= {0, 1, 2, 3}, added


def test_dedup_delay_and_add_many(api, queue_name):
    queue = queue_name()
    api.create_queue(queue)
    first = api.add(queue, b"x", dedup_id="one")
    again = api.add(queue, b"y", dedup_id="one")
    assert again.duplicate and again.task_id == first.task_id
    delayed = api.add(queue, b"later", delay=dt.timedelta(seconds=60))
    results = api.add_many(
        queue,
        [b"a", "b", fairway.TaskSpec(payload=b"c", priority=1), fairway.TaskSpec(payload=b"bad", priority=9)],
    )
    assert [type(r) for r in results[:3]] == [fairway.AddResult] * 3
    assert isinstance(results[3], fairway.InvalidArgument), results[3]
    assert "priority" in results[3].message
    tasks = api.poll_many(queue, 10, wait=5)
    got = {t.payload for t in tasks}
    # The first poll returns what is ready at once; take the rest.
    deadline = time.monotonic() + 10
    while got != {b"x", b"a", b"b", b"c"} and time.monotonic() < deadline:
        more = api.poll_many(queue, 10, wait=1)
        tasks += more
        got |= {t.payload for t in more}
    assert got == {b"x", b"a", b"b", b"c"}, "the delayed task is not ready yet, the bad one was never added"
    assert delayed.task_id not in {t.task_id for t in tasks}
    assert {t.payload: t.priority for t in tasks}[b"c"] == 1
    for t in tasks:
        api.complete(t)
    assert api.describe_queue(queue).delayed == 1


def test_completions_ride_with_the_next_poll(api, queue_name):
    queue = queue_name()
    api.create_queue(queue)
    api.add_many(queue, [b"one", b"two", b"three"])
    by_payload = {}
    deadline = time.monotonic() + 10
    while len(by_payload) < 3 and time.monotonic() < deadline:
        by_payload.update({t.payload: t for t in api.poll_many(queue, 3, wait=1)})
    assert set(by_payload) == {b"one", b"two", b"three"}
    one, two, three = by_payload[b"one"], by_payload[b"two"], by_payload[b"three"]
    api.complete(three)  # reported apart: sending it again is stale

    with pytest.raises(fairway.InvalidArgument) as over:
        api.poll_and_complete(queue, 1, [one] * 257, wait=0.1)
    assert "completions" in over.value.message and "256" in over.value.message

    api.add(queue, b"four")
    got = api.poll_and_complete(queue, 5, [one, (two.lease_token, b"its result"), three], wait=5)
    # The refused call above completed nothing: `one` completes now.
    assert got.completions[:2] == [None, None]
    assert isinstance(got.completions[2], fairway.LeaseLost), got.completions[2]
    assert [t.payload for t in got.tasks] == [b"four"]

    last = api.poll_and_complete(queue, 5, got.tasks, wait=0.1)
    assert (last.tasks, last.completions) == ([], [None])
    with pytest.raises(fairway.LeaseLost):
        api.complete(got.tasks[0])


def poll_up_to(api, queue, n, within=10.0):
    """The first ``n`` tasks the queue gives, or as many as came within ``within`` seconds."""
    got = []
    deadline = time.monotonic() + within
    while len(got) < n and time.monotonic() < deadline:
        got += api.poll_many(queue, n - len(got), wait=1)
    return got


def test_costs_share_the_work(api, queue_name):
    queue = queue_name()
    api.create_queue(queue)
    with pytest.raises(fairway.InvalidArgument) as bad:
        api.add(queue, b"x", cost=1001)
    assert "task.cost" in bad.value.message and "1000" in bad.value.message
    cheap = [fairway.TaskSpec(payload=b"c", fairness_key="cheap") for _ in range(220)]
    dear = [fairway.TaskSpec(payload=b"d", fairness_key="dear", cost=100) for _ in range(5)]
    assert all(isinstance(r, fairway.AddResult) for r in api.add_many(queue, cheap + dear))
    api.add(queue, b"d", fairness_key="dear", cost=100)
    got = poll_up_to(api, queue, 202)
    dear_count = sum(1 for t in got if t.fairness_key == "dear")
    # Equal weights share the work: 202 dispatches hold about two tasks of cost 100.
    assert len(got) == 202 and 1 <= dear_count <= 3, dear_count


def test_a_size_is_sent_instead_of_a_cost(api, queue_name):
    queue = queue_name()
    api.create_queue(queue)
    with pytest.raises(fairway.InvalidArgument) as bad:
        api.add(queue, b"x", size=100, cost=5)
    assert "task.size" in bad.value.message and "cost is 5" in bad.value.message
    with pytest.raises(fairway.InvalidArgument) as bad:
        api.add(queue, b"x", size=10**15 + 1)
    assert "task.size" in bad.value.message
    # On the default linear curve (reference 1000) a size of 100 costs 100.
    api.add_many(queue, [fairway.TaskSpec(payload=b"c", fairness_key="cheap") for _ in range(220)])
    api.add_many(queue, [fairway.TaskSpec(payload=b"d", fairness_key="dear", size=100) for _ in range(5)])
    got = poll_up_to(api, queue, 202)
    dear_count = sum(1 for t in got if t.fairness_key == "dear")
    assert len(got) == 202 and 1 <= dear_count <= 3, dear_count


def test_fail_dead_letters_and_redrive(api, queue_name):
    queue = queue_name()
    api.create_queue(queue)
    api.add(queue, b"retry-me")
    api.add(queue, b"kill-me", dedup_id="dead")
    tasks = {t.payload: t for t in api.poll_many(queue, 2, wait=5)}
    while len(tasks) < 2:
        tasks.update({t.payload: t for t in api.poll_many(queue, 2, wait=5)})
    retried = api.fail(tasks[b"retry-me"], "try later", retryable=True, retry_after=30)
    assert retried.will_retry
    assert retried.next_attempt_at is not None
    assert retried.next_attempt_at > dt.datetime.now(dt.timezone.utc) + dt.timedelta(seconds=25)
    dead = api.fail(tasks[b"kill-me"], "no hope", retryable=False)
    assert not dead.will_retry
    letters = api.dead_letters(queue)
    assert [(d.payload, d.message, d.dedup_id) for d in letters] == [(b"kill-me", "no hope", "dead")]
    redriven = api.redrive(queue)
    assert (redriven.redriven, redriven.duplicates) == (1, 0)
    assert api.dead_letters(queue) == []
    again = api.poll(queue, wait=5)
    assert again is not None and again.payload == b"kill-me" and again.attempt == 1
    api.complete(again)


def test_dead_letters_chosen_by_key_message_and_time(api, queue_name):
    queue = queue_name()
    api.create_queue(queue, partitions=1)
    before = dt.datetime.now(dt.timezone.utc) - dt.timedelta(seconds=5)
    for key, message in [("a", "timeout connecting"), ("b", "refused"), ("a", "refused")]:
        api.add(queue, key.encode(), fairness_key=key)
        task = api.poll(queue, wait=5)
        assert task is not None
        api.fail(task, message, retryable=False)
    letters = lambda **chosen: [(d.fairness_key, d.message) for d in api.dead_letters(queue, **chosen)]  # noqa: E731
    assert letters(key="a") == [("a", "timeout connecting"), ("a", "refused")]
    assert letters(message_contains="refused") == [("b", "refused"), ("a", "refused")]
    assert letters(key="a", message_contains="refused") == [("a", "refused")]
    assert letters(failed_before=before) == []
    assert len(letters(failed_from=before)) == 3
    with pytest.raises(ValueError, match="failed_from"):
        api.dead_letters(queue, failed_from=dt.datetime(2026, 1, 1))
    with pytest.raises(fairway.InvalidArgument, match="filter.failed_before"):
        api.dead_letters(queue, failed_from=before, failed_before=before)

    done = api.redrive(queue, key="b")
    assert (done.redriven, done.passed_over, done.more) == (1, 2, False)
    task = api.poll(queue, wait=5)
    assert task is not None and task.fairness_key == "b" and task.attempt == 1
    api.complete(task)
    assert letters() == [("a", "timeout connecting"), ("a", "refused")]


def test_a_paused_key_waits_while_the_others_go(api, queue_name):
    queue = queue_name()
    api.create_queue(queue)
    settings = api.pause_queue(queue, "slow")
    assert list(settings.paused_keys) == ["slow"]
    api.add(queue, b"s0", fairness_key="slow")
    api.add(queue, b"f0", fairness_key="fast")
    api.add(queue, b"s1", fairness_key="slow")
    info = api.describe_queue(queue)
    assert (info.paused, info.paused_keys, info.backlog) == (False, ["slow"], 3)
    first = api.poll(queue, wait=5)
    assert first is not None and first.payload == b"f0"
    api.complete(first)
    assert api.poll(queue, wait=1) is None, "the paused key's tasks wait"
    assert not api.resume_queue(queue, "slow").paused_keys
    resumed = [api.poll(queue, wait=5) for _ in range(2)]
    assert [t.payload for t in resumed if t is not None] == [b"s0", b"s1"]
    for task in resumed:
        api.complete(task)
    with pytest.raises(fairway.InvalidArgument) as refused:
        api.pause_queue(queue, "x" * 257)
    assert "fairness_key" in str(refused.value)


def test_a_task_is_found_by_its_id_in_each_state(api, queue_name):
    from fairway._proto.fairway.v1 import matching_pb2 as m

    queue = queue_name()
    api.create_queue(queue)
    added = api.add(queue, b"look", fairness_key="k", dedup_id="one")
    pending = api.get_task(queue, added.task_id, partition=added.partition)
    assert (pending.state, pending.waiting_for, pending.dedup_id) == (m.GetTaskResponse.PENDING, "its turn", "one")
    assert (pending.payload, pending.payload_bytes) == (b"", 4)
    assert api.get_task(queue, added.task_id, include_payload=True).payload == b"look"
    task = api.poll(queue, wait=5, worker_id="py-worker")
    assert task is not None and task.task_id == added.task_id
    leased = api.get_task(queue, added.task_id)
    assert (leased.state, leased.worker_id) == (m.GetTaskResponse.LEASED, "py-worker")
    api.complete(task)
    with pytest.raises(fairway.NotFound) as gone:
        api.get_task(queue, added.task_id)
    assert "completed" in str(gone.value)


def test_a_task_is_cancelled_in_each_state(api, queue_name):
    from fairway._proto.fairway.v1 import matching_pb2 as m

    queue = queue_name()
    api.create_queue(queue)
    first = api.add(queue, b"first", fairness_key="k")
    second = api.add(queue, b"second", fairness_key="k")
    held = api.poll(queue, wait=5)
    assert held is not None and held.task_id == first.task_id
    assert api.cancel_task(queue, first.task_id).state == m.GetTaskResponse.LEASED
    with pytest.raises(fairway.LeaseLost) as lost:
        api.heartbeat(held)
    assert "cancel" in str(lost.value)
    cancelled = api.cancel_task(queue, second.task_id)
    assert (cancelled.state, cancelled.fairness_key) == (m.GetTaskResponse.PENDING, "k")
    assert api.poll(queue, wait=1) is None, "a cancelled task is never delivered"
    with pytest.raises(fairway.NotFound):
        api.cancel_task(queue, 987_654)


def test_a_queue_is_purged_only_with_its_token(api, queue_name):
    queue, other = queue_name("purged"), queue_name("purged")
    api.create_queue(queue)
    api.create_queue(other)
    for n in range(5):
        api.add(queue, b"old %d" % n, fairness_key="k")
    asked = api.purge_queue(queue)
    assert not asked.purged and asked.confirmation
    with pytest.raises(fairway.InvalidArgument) as refused:
        api.purge_queue(queue, api.purge_queue(other).confirmation)
    assert "confirmation" in str(refused.value)
    purged = api.purge_queue(queue, asked.confirmation)
    assert (purged.purged, purged.waiting) == (True, 5)
    api.add(queue, b"new", fairness_key="k")
    task = api.poll(queue, wait=5)
    assert task is not None and task.payload == b"new", "only what was added after the purge"
    api.complete(task)
    assert api.poll(queue, wait=1) is None


def test_the_workers_polling_and_the_nodes_are_listed(api, queue_name):
    queue = queue_name("workers")
    api.create_queue(queue, 2)
    api.add(queue, b"x", fairness_key="k")
    task = api.poll(queue, wait=5, worker_id="py-worker")
    assert task is not None
    api.complete(task)
    listed = api.list_workers(queue)
    assert [(w.worker_id, w.queue, w.tasks_received) for w in listed.workers] == [("py-worker", queue, 1)]
    assert not listed.unanswered_nodes
    nodes = api.list_nodes()
    assert [n.node for n in nodes.nodes] == [nodes.answering_node]
    assert nodes.nodes[0].live and nodes.nodes[0].partitions_held >= 2


def test_queues_are_listed_and_their_settings_stored(api, queue_name):
    first, second = queue_name("listed"), queue_name("listed")
    api.create_queue(first)
    api.create_queue(second, 2)
    api.add(second, b"x")
    prefix = first[: first.index("listed") + len("listed")]
    listed = {q.queue: q for q in api.list_queues(prefix)}
    assert {first, second} <= set(listed)
    assert (listed[second].partitions, listed[second].backlog) == (2, 1)
    settings = api.update_queue(first, lease_timeout=5, max_attempts=7, weights={"acme": 3.0})
    assert (settings.lease_timeout.seconds, settings.max_attempts, dict(settings.weights)) == (5, 7, {"acme": 3.0})
    cleared = api.update_queue(first, clear=["weights"])
    assert dict(cleared.weights) == {} and cleared.max_attempts == 7
    with pytest.raises(fairway.InvalidArgument) as refused:
        api.update_queue(first, lease_timeout=0.5)
    assert "settings.lease_timeout" in str(refused.value)
    with pytest.raises(fairway.Aborted):
        api.update_queue(first, max_attempts=2, expected_version=1)
    with pytest.raises(TypeError):
        api.update_queue(first, ordering="fifo")


def test_errors_keep_code_and_meaning(api, queue_name):
    missing = queue_name("missing")
    with pytest.raises(fairway.NotFound) as not_found:
        api.describe_queue(missing)
    assert missing in not_found.value.message, "the message names the queue"
    assert not not_found.value.maybe_applied
    assert not_found.value.code.name == "NOT_FOUND"

    queue = queue_name()
    api.create_queue(queue)
    with pytest.raises(fairway.InvalidArgument) as bad:
        api.add(queue, b"x", priority=9)
    assert "priority" in bad.value.message and not bad.value.maybe_applied

    api.add(queue, b"once")
    task = api.poll(queue, wait=5)
    api.complete(task)
    with pytest.raises(fairway.LeaseLost) as lost:
        api.complete(task)
    assert isinstance(lost.value, fairway.FailedPrecondition) and not lost.value.maybe_applied
    with pytest.raises(fairway.LeaseLost):
        api.heartbeat(task)
    with pytest.raises(fairway.LeaseLost):
        api.fail(task, "late")
    with pytest.raises(fairway.InvalidArgument):
        api.poll_many(queue, 100000, wait=0.1)


def test_scheduler_calls(api, queue_name):
    visit_type = queue_name("vt").replace(".", "-")[:40]
    lister = f"forge/{visit_type}"
    url = f"https://forge.example/{visit_type}/repo"
    origins = [
        fairway.ListedOrigin(url=url, visit_type=visit_type, last_update=dt.datetime.now(dt.timezone.utc)),
        fairway.ListedOrigin(url=url + "2", visit_type=visit_type, extra_loader_arguments={"branch": "main"}),
    ]
    assert api.record_origins(lister, origins) == 2
    assert api.record_origins(lister, origins[:1]) == 0, "known origins are not new"
    api.finish_listing(lister)
    metrics = api.lister_metrics(lister)
    assert [(m.visit_type, m.known) for m in metrics.metrics] == [(visit_type, 2)]
    coverage = metrics.metrics[0]
    assert (coverage.never_visited, coverage.pending_changes, coverage.pending_lag_seconds) == (2, 0, 0)
    assert coverage.estimated_pending_updates == 0.0 and coverage.rated_origins >= 0
    assert metrics.HasField("listing_finished")
    stats = api.visit_stats(url, visit_type)
    assert stats is not None and stats.lister == lister and stats.enabled
    assert api.visit_stats(url + "/nope", visit_type) is None

    requested = api.request_visit(url, visit_type)
    assert requested.task_id > 0 and not requested.duplicate
    assert api.request_visit(url, visit_type).duplicate
    round_ = api.run_round(visit_type)
    assert round_.slots >= 0
    queue = f"visits.{visit_type}"
    seen = {}
    deadline = time.monotonic() + 20
    while url not in seen and time.monotonic() < deadline:
        for task in api.poll_many(queue, 10, wait=2):
            seen[json.loads(task.payload)["url"]] = task
    assert url in seen, f"the requested visit reaches {queue}"
    task = seen[url]
    for other in seen.values():
        outcome = fairway.VisitOutcome("eventful", snapshot=b"\x01\x02")
        api.complete(other, outcome.encode(other.payload))
    assert fairway.VisitOutcome.decode(fairway.VisitOutcome("eventful", b"\x01\x02").encode(task.payload)).origin_url == url
    newest = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.timezone.utc)
    dated = fairway.VisitOutcome("eventful", b"\x01", newest_change=newest)
    assert fairway.VisitOutcome.decode(dated.encode(task.payload)).newest_change == newest
    stats = wait_for_visit(api, url, visit_type)
    assert stats.last_visit_status == "successful" and stats.last_snapshot == b"\x01\x02"
    assert stats.HasField("change_rate_per_day"), "a visited origin has a rate estimate"


def wait_for_visit(api, url, visit_type, timeout=15.0):
    deadline = time.monotonic() + timeout
    while True:
        stats = api.visit_stats(url, visit_type)
        if stats is not None and stats.last_visit_status:
            return stats
        assert time.monotonic() < deadline, "the visit's outcome reaches the origin's stats"
        time.sleep(0.1)


def test_a_server_that_is_not_there_is_unavailable_and_not_applied():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    policy = fairway.RetryPolicy(max_attempts=3, initial_backoff=0.01, max_backoff=0.02)
    with fairway.Client(f"127.0.0.1:{port}", retry=policy, timeout=5) as c:
        started = time.monotonic()
        with pytest.raises(fairway.Unavailable) as error:
            c.add("q", b"x")
        assert not error.value.maybe_applied and error.value.retryable
        assert time.monotonic() - started < 5


def test_describe_queue_tells_a_task_held_for_the_next_poll(server_factory):
    # Held for 10 s (the most allowed), so that a slow machine still describes it held.
    server = server_factory(config='[matcher]\nquiet_hold = "10s"\n', name="held").start()
    queue = "held.q"
    with fairway.Client(server.address) as client:
        client.create_queue(queue)
        client.add_many(queue, [fairway.TaskSpec(payload=b"n", fairness_key="noisy") for _ in range(20)])
        first = client.poll(queue, wait=5)
        assert first is not None and first.fairness_key == "noisy"
        client.complete(first)
        # Beside a backlog, just after a poll: a quiet key's task is leased at once and held.
        added = client.add(queue, b"q", fairness_key="quiet")
        assert added.sync_matched, "a quiet key's task beside a backlog is held for the next poll"
        info = client.describe_queue(queue)
        assert (info.leased, info.held_for_polls) == (1, 1), info
        taken = client.poll(queue, wait=5)
        assert taken is not None and taken.fairness_key == "quiet", "the held task goes first"
        info = client.describe_queue(queue)
        assert (info.leased, info.held_for_polls) == (1, 0), info
