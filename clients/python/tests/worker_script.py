"""A worker process for the stop tests: python worker_script.py ADDRESS QUEUE LOG SECONDS CONCURRENCY GRACE.

Each task appends ``start PAYLOAD ATTEMPT`` to LOG, sleeps SECONDS, then
appends ``done PAYLOAD ATTEMPT`` and returns.
"""

import logging
import sys
import time

import fairway


def main() -> None:
    address, queue, log_path, seconds, concurrency, grace = sys.argv[1:7]
    logging.basicConfig(level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(name)s %(message)s")
    worker = fairway.Worker(address, concurrency=int(concurrency), poll_wait=1, grace_period=float(grace))

    def note(line: str) -> None:
        with open(log_path, "a") as log:
            log.write(line + "\n")

    @worker.task(queue)
    def work(payload: bytes, ctx: fairway.TaskContext) -> bytes:
        note(f"start {payload.decode()} {ctx.attempt}")
        time.sleep(float(seconds))
        note(f"done {payload.decode()} {ctx.attempt}")
        return b"ok"

    worker.run()


if __name__ == "__main__":
    main()
