"""An example git loader written with Fairway's Python library: takes the
visits of ``visits.git``, snapshots each origin's branches with
``git ls-remote``, and reports the outcome.

    pip install ./clients/python
    python examples/python/loader.py --server 127.0.0.1:7070 --concurrency 4

Ctrl-C (or SIGTERM) stops taking visits and lets the running ones finish
(30 s at most, then they are handed back); a second Ctrl-C hands them back
at once. A real loader would fetch the objects and store them before
returning the outcome.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import subprocess
import sys

import fairway

log = logging.getLogger("loader")


def build_worker(server: str, concurrency: int, visit_type: str = "git") -> fairway.Worker:
    worker = fairway.Worker(server, concurrency=concurrency)

    @worker.task(f"visits.{visit_type}", decode="json")
    def load(visit: dict, ctx: fairway.TaskContext) -> fairway.VisitOutcome:
        url = visit["url"]
        log.info("visiting %s (attempt %d)", url, ctx.attempt)
        listing = subprocess.run(
            ["git", "ls-remote", "--", url],
            capture_output=True,
            text=True,
            timeout=600,
            env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/bin:/bin:/usr/local/bin"},
        )
        if listing.returncode != 0:
            errors = listing.stderr
            if "not found" in errors or "does not appear to be a git repository" in errors:
                return fairway.VisitOutcome(status="not_found")
            # May pass (the forge is down): retried after the queue's backoff.
            raise RuntimeError(f"git ls-remote {url}: {errors.strip().splitlines()[0] if errors.strip() else listing.returncode}")
        snapshot = hashlib.sha1(listing.stdout.encode()).digest()
        return fairway.VisitOutcome(status="eventful", snapshot=snapshot)

    return worker


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="127.0.0.1:7070", help="the Fairway server (default %(default)s)")
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--visit-type", default="git")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    build_worker(args.server, args.concurrency, args.visit_type).run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
