"""The examples of ``examples/python`` end to end: the lister records an
origin served by a real ``git daemon``, a scheduling round queues its visit,
and the loader visits it and reports the snapshot of its branches."""

from __future__ import annotations

import hashlib
import pathlib
import signal
import socket
import subprocess
import sys

import pytest

import fairway

from conftest import REPO, wait_until

EXAMPLES = REPO / "examples" / "python"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def git_daemon(tmp_path: pathlib.Path):
    """A real git server with one repository, ``example.git``, of one commit."""
    repo = tmp_path / "example.git"
    git = ["git", "-c", "user.name=t", "-c", "user.email=t@example.org"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    subprocess.run(git + ["-C", str(repo), "commit", "-q", "--allow-empty", "-m", "first"], check=True)
    port = free_port()
    daemon = subprocess.Popen(
        ["git", "daemon", "--export-all", "--reuseaddr", f"--base-path={tmp_path}", "--listen=127.0.0.1",
         f"--port={port}", str(tmp_path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"git://127.0.0.1:{port}/example.git"
    try:
        wait_until(
            lambda: subprocess.run(["git", "ls-remote", url], capture_output=True).returncode == 0,
            30,
            "git daemon to serve the repository",
        )
        yield url
    finally:
        daemon.terminate()
        daemon.wait(timeout=30)


def test_the_example_lister_and_loader_visit_an_origin(server, git_daemon, tmp_path):
    urls = tmp_path / "urls.txt"
    urls.write_text(f"# one origin\n{git_daemon}\n")
    listed = subprocess.run(
        [sys.executable, str(EXAMPLES / "lister.py"), "--server", server.address, "--lister", "example/local",
         "--urls", str(urls)],
        capture_output=True, text=True, timeout=60,
    )
    assert listed.returncode == 0, listed.stderr
    assert "recorded 1 origins, 1 of them new" in listed.stderr

    with fairway.Client(server.address) as client:
        round_ = client.run_round("git")
        # The server runs rounds of its own every 10 s: one of them may have
        # queued the visit between the listing and this round.
        queued = client.describe_queue("visits.git")
        assert sum(round_.sent_by_lister.values()) + queued.backlog + queued.leased >= 1, (round_, queued)
        loader = subprocess.Popen(
            [sys.executable, str(EXAMPLES / "loader.py"), "--server", server.address, "--concurrency", "2"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )
        try:
            stats = wait_until(
                lambda: (lambda s: s if s is not None and s.last_visit_status else None)(
                    client.visit_stats(git_daemon, "git")
                ),
                60,
                "the loader to report the visit",
            )
        finally:
            loader.send_signal(signal.SIGTERM)
            _, errors = loader.communicate(timeout=60)
        assert loader.returncode == 0, errors
        assert stats.last_visit_status == "successful", (stats, errors)
        refs = subprocess.run(["git", "ls-remote", "--", git_daemon], capture_output=True, text=True, check=True)
        assert stats.last_snapshot == hashlib.sha1(refs.stdout.encode()).digest()
