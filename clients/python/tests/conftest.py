"""Starts real ``fairway serve`` processes for the tests.

The binary is ``$FAIRWAY_BIN``, else ``<repo>/target/debug/fairway`` (built by
``cargo build``). Each server has a temporary data directory, listens on
127.0.0.1 (port 0 unless told), and is killed at the end; the tail of its log
is attached to the report of a failing test.
"""

from __future__ import annotations

import os
import pathlib
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from typing import Callable, Dict, List, Optional

import pytest

# The servers are started with fork and exec (subprocess, which forks on
# Python 3.9) while workers' channels are busy. gRPC's fork handlers are for
# children that go on using gRPC; with them on, grpcio 1.49 printed
# "epoll_ctl failed" in the child and a worker's channel took seconds to
# connect again after a restart. gRPC's advice for fork-then-exec is to turn
# them off; it is read when grpc is first imported, which is after this.
os.environ.setdefault("GRPC_ENABLE_FORK_SUPPORT", "false")

HERE = pathlib.Path(__file__).resolve().parent
REPO = HERE.parent.parent.parent

# Queues with short leases, for the tests of heartbeats and stops.
SHORT_LEASE_QUEUES = ("lease.sleep", "lease.busy", "lease.async", "stop.term", "stop.twice", "restart.q", "lost.q")
SERVER_CONFIG = "".join(f'[queues."{q}"]\nlease_timeout = "2s"\n\n' for q in SHORT_LEASE_QUEUES)

_SERVERS: List["ServerProcess"] = []


def fairway_binary() -> str:
    path = os.environ.get("FAIRWAY_BIN") or str(REPO / "target" / "debug" / "fairway")
    if not os.path.isfile(path) or not os.access(path, os.X_OK):
        raise pytest.UsageError(
            f"the fairway server binary is missing: {path} (build it with `cargo build` at the repository root, "
            "or point FAIRWAY_BIN at one)"
        )
    return path


def wait_until(predicate: Callable[[], object], timeout: float, what: str, interval: float = 0.05) -> object:
    """Polls ``predicate`` until it is truthy; fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


class ServerProcess:
    """One ``fairway serve``, restartable on the same data directory and port."""

    def __init__(self, config: str = SERVER_CONFIG, name: str = "server") -> None:
        self.dir = pathlib.Path(tempfile.mkdtemp(prefix=f"fairway-py-{name}-"))
        self.data = self.dir / "data"
        self.config = self.dir / "fairway.toml"
        self.config.write_text(config)
        self.log_path = self.dir / "server.log"
        self.name = name
        self.process: Optional[subprocess.Popen] = None
        self.address = ""
        _SERVERS.append(self)

    def start(self, listen: str = "127.0.0.1:0", timeout: float = 30.0) -> "ServerProcess":
        log = open(self.log_path, "ab")
        command = [fairway_binary(), "serve", "--listen", listen, "--store", f"embedded:{self.data}"]
        command += ["--config", str(self.config)]
        env = dict(os.environ, NO_COLOR="1")
        for name in ("FAIRWAY_CONFIG", "FAIRWAY_BIN"):
            env.pop(name, None)
        self.process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=log, env=env)
        log.close()
        line: Dict[str, bytes] = {}
        reader = threading.Thread(target=lambda: line.setdefault("first", self.process.stdout.readline()))
        reader.daemon = True
        reader.start()
        reader.join(timeout)
        first = line.get("first", b"").decode(errors="replace").strip()
        if not first.startswith("listening on "):
            self.kill()
            raise RuntimeError(
                f"fairway serve did not start: it printed {first!r} instead of `listening on ADDRESS`; "
                f"log:\n{self.log_tail()}"
            )
        self.address = first[len("listening on ") :]
        # Keep draining stdout so that the server never blocks on it.
        threading.Thread(target=self._drain, args=(self.process,), daemon=True).start()
        return self

    @staticmethod
    def _drain(process: subprocess.Popen) -> None:
        for _ in process.stdout:
            pass

    def kill(self) -> None:
        """kill -9, and wait for the process to be gone."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=30)

    def freeze(self, timeout: float = 10.0) -> None:
        """SIGSTOP, and wait until every thread of the process has stopped.

        The signal is delivered to each thread on its own, so without the wait
        a thread still running can answer one more request."""
        assert self.process is not None and self.process.poll() is None, "freeze a running server"
        self.process.send_signal(signal.SIGSTOP)

        def all_stopped() -> bool:
            states = self.thread_states()
            return bool(states) and all(state in ("T", "t") for state in states)

        wait_until(all_stopped, timeout, f"every thread of fairway serve ({self.name}) stopped by SIGSTOP")

    def thaw(self) -> None:
        """SIGCONT: the frozen server runs again."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGCONT)

    def restart_on_same_port(self, timeout: float = 30.0, while_down: Callable[[], None] = lambda: None) -> None:
        """Kill -9, run ``while_down``, then start again on the same data
        directory and port (retried until ``timeout`` while the port is busy)."""
        self.kill()
        while_down()
        deadline = time.monotonic() + timeout
        while True:
            try:
                self.start(listen=self.address)
                return
            except RuntimeError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    def stop(self) -> None:
        self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)

    def thread_states(self) -> Dict[str, int]:
        """How many of the process's threads are in each state of
        /proc/PID/task/*/stat (R running, S sleeping, D in I/O, T stopped)."""
        states: Dict[str, int] = {}
        if self.process is None:
            return states
        for stat in pathlib.Path(f"/proc/{self.process.pid}/task").glob("*/stat"):
            try:
                # The state follows the command name in parentheses.
                state = stat.read_text().rsplit(")", 1)[1].split()[0]
            except (OSError, IndexError):
                continue
            states[state] = states.get(state, 0) + 1
        return states

    def health(self, timeout: float = 5.0) -> str:
        """What the process is doing now, for the report of a failed test:
        alive or not, its threads' states, and whether a new connection gets
        the server's HTTP/2 SETTINGS frame within ``timeout`` seconds."""
        if self.process is None:
            return "never started"
        code = self.process.poll()
        if code is not None:
            return f"exited with status {code}"
        states = self.thread_states()
        described = f"pid {self.process.pid}, threads by state {dict(sorted(states.items()))}"
        if states and all(state in ("T", "t") for state in states):
            return f"{described}; stopped (SIGSTOP), not probed"
        return f"{described}; a new connection: {http2_settings_probe(self.address, timeout)}"

    def log_tail(self, lines: int = 80) -> str:
        try:
            text = self.log_path.read_text(errors="replace").splitlines()
        except OSError:
            return "(no log)"
        return "\n".join(text[-lines:])


@pytest.fixture(scope="session")
def server() -> "ServerProcess":
    process = ServerProcess(name="main").start()
    yield process
    process.stop()


@pytest.fixture
def server_factory():
    started: List[ServerProcess] = []

    def make(config: str = SERVER_CONFIG, name: str = "extra") -> ServerProcess:
        process = ServerProcess(config=config, name=name)
        started.append(process)
        return process

    yield make
    for process in started:
        process.stop()


@pytest.fixture
def client(server):
    import fairway

    with fairway.Client(server.address) as c:
        yield c


@pytest.fixture
def queue_name(request) -> Callable[[str], str]:
    """A fresh queue name per test (the session server is shared)."""

    def make(prefix: str = "t") -> str:
        return f"{prefix}.{request.node.name[:40].replace('[', '-').replace(']', '')}.{uuid.uuid4().hex[:8]}"

    return make


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        for process in _SERVERS:
            report.sections.append((f"fairway serve ({process.name}) now", process.health()))
            report.sections.append((f"fairway serve log ({process.name}, {process.log_path})", process.log_tail()))


def http2_settings_probe(address: str, timeout: float) -> str:
    """Connects to ``address`` (plain TCP), sends the HTTP/2 client preface
    and an empty SETTINGS frame, and says how long the server took to send
    its own SETTINGS frame, or what happened instead."""
    host, _, port = address.rpartition(":")
    begun = time.monotonic()
    try:
        with socket.create_connection((host, int(port)), timeout=timeout) as conn:
            conn.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + bytes([0, 0, 0, 4, 0, 0, 0, 0, 0]))
            header = b""
            while len(header) < 9:
                chunk = conn.recv(9 - len(header))
                if not chunk:
                    return f"closed by the server after {time.monotonic() - begun:.3f} s, before any frame"
                header += chunk
    except socket.timeout:
        return f"no frame within {timeout} s (connected: the server accepts but does not answer)"
    except OSError as error:
        return f"failed after {time.monotonic() - begun:.3f} s: {error}"
    kind = "SETTINGS" if header[3] == 4 else f"a frame of type {header[3]}"
    return f"{kind} after {time.monotonic() - begun:.3f} s"


def python_for_subprocess() -> str:
    return sys.executable
