"""The Python library's side of the worker benchmark: one empty task
function, ``concurrency`` slots, until SIGTERM."""

import sys

import fairway

address, queue, concurrency = sys.argv[1], sys.argv[2], int(sys.argv[3])
worker = fairway.Worker(address, concurrency=concurrency, poll_wait=5.0)


@worker.task(queue)
def noop(payload: bytes) -> None:
    return None


worker.run()
