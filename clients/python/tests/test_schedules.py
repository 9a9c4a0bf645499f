"""Recurring schedules and task deadlines against a real server, through Client and AsyncClient."""

from __future__ import annotations

import datetime as dt
import uuid

import pytest

import fairway
from conftest import ServerProcess, wait_until
from test_client import AsyncAsSync
from test_worker import run_in_thread, stop_and_join

HOUR = dt.timedelta(hours=1)


@pytest.fixture(params=["sync", "async"])
def api(request, server):
    c = fairway.Client(server.address) if request.param == "sync" else AsyncAsSync(server.address)
    yield c
    c.close()


def schedule_id(prefix: str = "py") -> str:
    """A fresh schedule id (the session server is shared)."""
    return f"{prefix}/{uuid.uuid4().hex[:12]}"


def listed(api, health=None, **kwargs):
    """Every schedule list_schedules yields, from either client."""
    if isinstance(api, AsyncAsSync):

        async def collect():
            return [s async for s in api.inner.list_schedules(health, **kwargs)]

        return api.loop.run_until_complete(collect())
    return list(api.list_schedules(health, **kwargs))


def now() -> dt.datetime:
    return dt.datetime.now(dt.timezone.utc)


def aware(value) -> bool:
    return isinstance(value, dt.datetime) and value.utcoffset() == dt.timedelta(0)


def test_a_periodic_schedule_runs_and_its_good_end_is_counted(api, queue_name):
    queue, sid = queue_name("runs"), schedule_id()
    created = api.create_schedule(sid, queue, period=HOUR, cooldown=600, payload=b"refresh", priority=2)
    assert (created.id, created.queue, created.paused) == (sid, queue, False)
    assert created.health == fairway.Health.OK and created.health == "ok"
    assert created.counts.succeeded == 0 and created.last_good_end is None
    assert aware(created.can_start_by) and aware(created.created_at)

    # A new schedule runs at once: it has never ended a run well.
    run = api.poll(queue, wait=10)
    assert run is not None, "the first run reaches the queue"
    assert (run.payload, run.fairness_key, run.priority) == (b"refresh", sid, 2), "the key defaults to the id"
    started = wait_until(
        lambda: (lambda s: s if s.runs and s.runs[0].started_at else None)(api.describe_schedule(sid)),
        10,
        "the run's start in the schedule",
    )
    assert started.runs[0].task_id == run.task_id and aware(started.runs[0].started_at)

    api.complete(run)
    done = wait_until(
        lambda: (lambda s: s if s.counts.succeeded == 1 else None)(api.describe_schedule(sid)),
        10,
        "the completion in the schedule's counts",
    )
    assert done.health == "ok", done.health_reason
    assert (done.counts.fired, done.consecutive_failures, done.runs) == (1, 0, [])
    assert aware(done.last_good_end) and done.last_good_end <= now() + dt.timedelta(seconds=5)
    assert done.error_at is not None and done.error_at > now() + dt.timedelta(minutes=50), "good for an hour"
    # The cooldown holds the next run back ten minutes.
    assert done.can_start_by >= done.last_good_end + dt.timedelta(minutes=9)
    assert api.poll(queue, wait=0.5) is None
    api.delete_schedule(sid)


def test_pause_resume_trigger_update_and_delete(api, queue_name):
    queue, sid = queue_name("runs"), schedule_id()
    held = api.create_schedule(sid, queue, period=HOUR, cooldown=dt.timedelta(minutes=30), paused_note="not yet")
    assert (held.paused, held.paused_note) == (True, "not yet")
    assert api.poll(queue, wait=0.5) is None, "a schedule created paused adds no run"

    resumed = api.resume_schedule(sid)
    assert (resumed.paused, resumed.paused_note) == (False, "")
    first = api.poll(queue, wait=10)
    assert first is not None
    api.complete(first)
    wait_until(lambda: api.describe_schedule(sid).counts.succeeded == 1, 10, "the first good end")

    paused = api.pause_schedule(sid, note="forge maintenance")
    assert (paused.paused, paused.paused_note) == (True, "forge maintenance")
    described = api.describe_schedule(sid)
    assert (described.paused, described.paused_note) == (True, "forge maintenance")
    assert not api.resume_schedule(sid).paused

    # The cooldown holds the next run back; a trigger does not wait for it.
    assert api.poll(queue, wait=0.5) is None
    api.trigger_schedule(sid)
    second = api.poll(queue, wait=10)
    assert second is not None, "the triggered run reaches the queue"
    api.complete(second)
    wait_until(lambda: api.describe_schedule(sid).counts.succeeded == 2, 10, "the triggered run's good end")

    # An update replaces the spec and keeps the history.
    updated = api.update_schedule(sid, queue, every=HOUR, phase=60, payload=b"hourly")
    assert updated.counts.succeeded == 2 and updated.raw.spec.WhichOneof("cadence") == "interval"
    ticks = api.describe_schedule(sid).next_ticks
    assert len(ticks) == 5 and all(aware(t) for t in ticks)
    assert {b - a for a, b in zip(ticks, ticks[1:])} == {HOUR}
    assert all(t.minute == 1 and t.second == 0 for t in ticks), "a phase of 60 s after each hour"

    api.delete_schedule(sid)
    with pytest.raises(fairway.NotFound) as missing:
        api.describe_schedule(sid)
    assert sid in missing.value.message
    with pytest.raises(fairway.NotFound):
        api.trigger_schedule(sid)


def test_bad_schedules_are_refused_naming_the_field(api, queue_name):
    queue, sid = queue_name("runs"), schedule_id()
    with pytest.raises(fairway.InvalidArgument) as bad_cron:
        api.create_schedule(sid, queue, cron="61 * * * *", max_duration=60)
    assert "spec.cron.expression" in bad_cron.value.message
    assert not bad_cron.value.maybe_applied and bad_cron.value.code.name == "INVALID_ARGUMENT"
    with pytest.raises(fairway.InvalidArgument) as bad_zone:
        api.create_schedule(sid, queue, cron="0 3 * * *", max_duration=HOUR, time_zone="Mars/Olympus")
    assert "spec.time_zone" in bad_zone.value.message
    with pytest.raises(fairway.NotFound):
        api.describe_schedule(sid)

    # What cannot make a spec at all is refused before it is sent.
    with pytest.raises(ValueError, match="period, cron"):
        api.create_schedule(sid, queue, period=60, cron="* * * * *")
    with pytest.raises(ValueError, match="got none"):
        api.create_schedule(sid, queue)
    with pytest.raises(ValueError, match="cooldown"):
        api.create_schedule(sid, queue, every=60, cooldown=10)
    with pytest.raises(ValueError, match="overlap"):
        api.create_schedule(sid, queue, period=60, overlap="sometimes")
    with pytest.raises(ValueError, match="start_at"):
        api.create_schedule(sid, queue, period=60, start_at=dt.datetime(2030, 1, 1))
    with pytest.raises(ValueError, match="health"):
        listed(api, "poor")

    created = api.create_schedule(sid, queue, period=60, paused_note="held")
    with pytest.raises(fairway.AlreadyExists):
        api.create_schedule(sid, queue, period=60, paused_note="held")
    assert created.paused
    api.delete_schedule(sid)


def test_list_schedules_filters_by_health_over_pages(api, queue_name):
    queue = queue_name("runs")
    late, fine = schedule_id("late"), schedule_id("fine")
    # Paused, so that no run is added: an interval schedule whose every run
    # must end within a second of its tick is in ERROR a second or two
    # after creation, a periodic one that never ran has a day's grace.
    api.create_schedule(late, queue, every=1, max_duration=1, paused_note="held")
    api.create_schedule(fine, queue, period=HOUR, paused_note="held")

    errors = wait_until(
        lambda: (lambda found: found if late in {s.id for s in found} else None)(listed(api, "error")),
        15,
        "the late schedule among those in ERROR",
    )
    assert all(s.health == fairway.Health.ERROR for s in errors)
    assert fine not in {s.id for s in errors}
    late_one = next(s for s in errors if s.id == late)
    assert late_one.error_at is not None and late_one.error_at < now() and late_one.health_reason
    assert fine in {s.id for s in listed(api, fairway.Health.OK)}
    assert late not in {s.id for s in listed(api, "ok")}
    everything = listed(api, page_size=1)
    ids = [s.id for s in everything]
    assert {late, fine} <= set(ids) and len(ids) == len(set(ids)), "every page once, no schedule twice"
    for sid in (late, fine):
        api.delete_schedule(sid)


# -- Deadlines --------------------------------------------------------------

# One deadline-ordered queue per client kind, each test's order checked on a
# queue of its own.
DEADLINE_QUEUES = {"sync": "deadline.sync", "async": "deadline.async"}


@pytest.fixture(scope="module")
def deadline_server():
    config = "".join(f'[queues."{q}"]\nordering = "deadline"\n\n' for q in DEADLINE_QUEUES.values())
    process = ServerProcess(config=config, name="deadline").start()
    yield process
    process.stop()


@pytest.mark.parametrize("kind", ["sync", "async"])
def test_deadlines_order_a_deadline_queue(deadline_server, kind):
    queue = DEADLINE_QUEUES[kind]
    api = fairway.Client(deadline_server.address) if kind == "sync" else AsyncAsSync(deadline_server.address)
    try:
        api.create_queue(queue)
        base = now().replace(microsecond=123000)

        # add_many's TaskSpec carries a deadline too; a task without one goes
        # by its add time and is never late, so one whose deadline already
        # passed goes after it (late tasks go after every task still on time).
        results = api.add_many(
            queue, [fairway.TaskSpec(payload=b"late", deadline=base - dt.timedelta(minutes=5)), b"none"]
        )
        assert all(isinstance(r, fairway.AddResult) for r in results), results
        first, second = api.poll(queue, wait=5), api.poll(queue, wait=5)
        assert (first.payload, second.payload) == (b"none", b"late")
        assert first.deadline is None and second.deadline == base - dt.timedelta(minutes=5)
        api.complete(first)
        api.complete(second)

        # Added latest deadline first, each under its own fairness key; a
        # deadline as a datetime (in another zone), as float or int Unix seconds.
        paris = dt.timezone(dt.timedelta(hours=1))
        deadlines = {
            b"d": (base + dt.timedelta(seconds=40)).astimezone(paris),
            b"c": (base + dt.timedelta(seconds=30)).timestamp(),
            b"b": base + dt.timedelta(seconds=20),
            b"a": int((base + dt.timedelta(seconds=10)).timestamp()),
        }
        for payload, deadline in deadlines.items():
            api.add(queue, payload, fairness_key=f"key-{payload.decode()}", deadline=deadline)
        tasks = [api.poll(queue, wait=5) for _ in deadlines]
        assert [t.payload for t in tasks if t] == [b"a", b"b", b"c", b"d"], "earliest deadline first"
        for task in tasks:
            given = deadlines[task.payload]
            if not isinstance(given, dt.datetime):
                given = dt.datetime.fromtimestamp(given, tz=dt.timezone.utc)
            assert aware(task.deadline)
            assert task.deadline == given, "kept to the millisecond"
            api.complete(task)

        with pytest.raises(ValueError, match="deadline"):
            api.add(queue, b"x", deadline=dt.datetime(2030, 1, 1, 12, 0))
        with pytest.raises(ValueError, match="deadline"):
            fairway.TaskSpec(payload=b"x", deadline=dt.datetime(2030, 1, 1))
        with pytest.raises(TypeError, match="deadline"):
            api.add(queue, b"x", deadline="tomorrow")
        assert api.poll(queue, wait=0.2) is None, "nothing refused was added"
    finally:
        api.close()


def test_a_worker_sees_the_deadline_on_any_queue(deadline_server):
    # A queue of the default ordering carries the deadline and ignores it.
    queue = "worker.q"
    deadline = now() + HOUR
    with fairway.Client(deadline_server.address) as c:
        c.create_queue(queue)
        c.add(queue, b"w", deadline=deadline.timestamp())
        seen = {}
        worker = fairway.Worker(deadline_server.address, concurrency=1, poll_wait=1)

        @worker.task(queue)
        def handle(payload: bytes, ctx: fairway.TaskContext):
            seen[payload] = ctx.deadline

        thread = run_in_thread(worker)
        wait_until(lambda: c.describe_queue(queue).completed == 1, 15, "the worker's completion")
        stop_and_join(worker, thread)
        assert abs(seen[b"w"] - deadline) < dt.timedelta(milliseconds=1)
