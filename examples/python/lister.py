"""An example lister: records the origins of a forge with Fairway's
scheduler, then marks the listing finished.

    pip install ./clients/python
    python examples/python/lister.py --lister gitlab/framagit --gitlab https://framagit.org
    python examples/python/lister.py --lister mirror/local --urls urls.txt --visit-type git

With ``--gitlab`` it pages through the instance's public projects
(``/api/v4/projects``), giving each project's last activity as its last
update, so the scheduler visits the recently changed ones first. With
``--urls`` it records the URLs of a file, one per line (no update dates).
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import sys
import urllib.request
from typing import Iterator, List

import fairway

log = logging.getLogger("lister")
BATCH = 500


def gitlab_projects(base: str, max_pages: int) -> Iterator[fairway.ListedOrigin]:
    """The public projects of a GitLab instance, oldest id first."""
    for page in range(1, max_pages + 1):
        url = f"{base.rstrip('/')}/api/v4/projects?per_page=100&order_by=id&sort=asc&page={page}"
        with urllib.request.urlopen(url, timeout=60) as response:
            projects = json.load(response)
        if not projects:
            return
        for project in projects:
            updated = project.get("last_activity_at")
            yield fairway.ListedOrigin(
                url=project["http_url_to_repo"],
                visit_type="git",
                last_update=datetime.datetime.fromisoformat(updated.replace("Z", "+00:00")) if updated else None,
                is_fork="forked_from_project" in project,
            )


def listed_urls(path: str, visit_type: str) -> Iterator[fairway.ListedOrigin]:
    with open(path) as lines:
        for line in lines:
            if line.strip() and not line.startswith("#"):
                yield fairway.ListedOrigin(url=line.strip(), visit_type=visit_type)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--server", default="127.0.0.1:7070", help="the Fairway server (default %(default)s)")
    parser.add_argument("--lister", required=True, help="the lister's name and instance, e.g. gitlab/framagit")
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--gitlab", metavar="URL", help="a GitLab instance to list")
    source.add_argument("--urls", metavar="FILE", help="a file of origin URLs, one per line")
    parser.add_argument("--visit-type", default="git", help="for --urls (default %(default)s)")
    parser.add_argument("--max-pages", type=int, default=10, help="for --gitlab (default %(default)s)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")

    origins = gitlab_projects(args.gitlab, args.max_pages) if args.gitlab else listed_urls(args.urls, args.visit_type)
    recorded = new = 0
    with fairway.Client(args.server) as client:
        batch: List[fairway.ListedOrigin] = []
        for origin in origins:
            batch.append(origin)
            if len(batch) == BATCH:
                new += client.record_origins(args.lister, batch)
                recorded += len(batch)
                batch = []
        if batch:
            new += client.record_origins(args.lister, batch)
            recorded += len(batch)
        client.finish_listing(args.lister)
    log.info("%s: recorded %d origins, %d of them new; listing finished", args.lister, recorded, new)
    return 0


if __name__ == "__main__":
    sys.exit(main())
