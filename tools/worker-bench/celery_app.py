"""The Celery side of the worker benchmark: one empty task, acknowledged
after it runs (``task_acks_late``), so that Celery gives the same
at-least-once promise as a Fairway lease."""

import os

from celery import Celery

app = Celery("bench", broker=os.environ["BENCH_REDIS_URL"])
app.conf.task_acks_late = True
app.conf.worker_hijack_root_logger = False


@app.task(name="bench.noop")
def noop() -> None:
    return None
