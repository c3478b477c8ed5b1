"""Real servers and a real browser for the end-to-end notebook tests.

The recipe of ``../shared/TESTING.md``: a Jupyter server (``jupyter lab``, which
also serves Notebook 7 at ``/notebooks/...`` when ``notebook`` is installed) or
Voilà on 127.0.0.1 with a random free port and token, serving temporary copies of
the notebooks, and the Debian Chromium driven headless through Playwright (no
``playwright install``). Every process started here is stopped by its PID, its
kernels with it.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


def chromium_path() -> str | None:
    """The Chromium binary: ``NBDURABLE_CHROMIUM``, ``/usr/bin/chromium`` or ``chromium`` on PATH."""
    for candidate in (os.environ.get("NBDURABLE_CHROMIUM"), "/usr/bin/chromium"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("chromium")


def artifacts_dir() -> Path:
    """Where screenshots go: ``NBDURABLE_ARTIFACTS``, default ``<repo>/test-artifacts/``."""
    path = Path(os.environ.get("NBDURABLE_ARTIFACTS") or REPO / "test-artifacts")
    path.mkdir(parents=True, exist_ok=True)
    return path


def free_port() -> int:
    """A TCP port free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def process_tree(pid: int) -> list[int]:
    """Every descendant of ``pid`` (Linux ``/proc``), deepest last."""
    found: list[int] = []
    queue = [pid]
    while queue:
        parent = queue.pop()
        for task in Path(f"/proc/{parent}/task").glob("*"):
            with contextlib.suppress(OSError):
                kids = [int(k) for k in (task / "children").read_text().split()]
                found.extend(kids)
                queue.extend(kids)
    return found


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def stop_pids(pids: Iterable[int]) -> None:
    """SIGKILL each of ``pids`` still alive (processes a test started and left behind)."""
    for pid in pids:
        if _alive(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


@dataclass
class Server:
    """A Jupyter server process (JupyterLab or Voilà) started by a test.

    Attributes:
        name: What it is, for messages (``jupyter lab``, ``voila``).
        proc: The process.
        port: Its port on 127.0.0.1.
        token: Its token ("" for Voilà, which runs without one).
        log: The file its stdout and stderr go to.
    """

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    token: str
    log: Path
    ready_path: str = "/api/status"
    any_answer: bool = False
    kernels: set[int] = field(default_factory=set)
    notary: tuple[Path, Path] | None = None
    settings: Path | None = None
    root: Path | None = None

    @property
    def base(self) -> str:
        """``http://127.0.0.1:PORT``."""
        return f"http://127.0.0.1:{self.port}"

    def url(self, path: str) -> str:
        """``path`` on this server, with the token when it has one."""
        if not self.token:
            return f"{self.base}{path}"
        return f"{self.base}{path}{'&' if '?' in path else '?'}token={self.token}"

    def log_tail(self, chars: int = 4000) -> str:
        """The end of the server's log (for failure messages)."""
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError:
            return "(no log)"

    def wait_ready(self, path: str, timeout: float = 60.0, *, any_answer: bool = False) -> None:
        """Wait until ``GET path`` answers 200 (any HTTP answer with ``any_answer``).

        Fails with the server's log if the process dies first.
        """
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(
                    f"{self.name} exited ({self.proc.returncode}):\n{self.log_tail()}"
                )
            try:
                with urllib.request.urlopen(self.url(path), timeout=2) as response:
                    if response.status == 200:
                        return
            except urllib.error.HTTPError:
                if any_answer:
                    return
            except (urllib.error.URLError, OSError):
                pass
            time.sleep(0.2)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log_tail()}")

    def ready(self, timeout: float = 60.0) -> Server:
        """Wait until the server answers (see :meth:`wait_ready`); returns it."""
        self.wait_ready(self.ready_path, timeout, any_answer=self.any_answer)
        return self

    def api(self, path: str, method: str = "GET") -> Any:
        """Call the server's REST API (``/api/...``); the decoded JSON answer, or None."""
        request = urllib.request.Request(self.url(path), method=method)
        with urllib.request.urlopen(request, timeout=10) as response:
            body = response.read()
        return json.loads(body) if body else None

    def kernel_state(self, notebook: str) -> str | None:
        """The execution state of the kernel of ``notebook`` (a path under the root), if any."""
        for session in self.api("/api/sessions"):
            if session.get("path") == notebook and session.get("kernel"):
                return str(session["kernel"].get("execution_state"))
        return None

    def shutdown_kernels(self) -> None:
        """End every session and its kernel (between tests sharing the server)."""
        self.note_kernels()
        for session in self.api("/api/sessions"):
            with contextlib.suppress(urllib.error.URLError, OSError):
                self.api(f"/api/sessions/{session['id']}", method="DELETE")

    def trust(self, notebook: Any) -> None:
        """Sign ``notebook`` (an nbformat node) with this server's notary, as ``jupyter trust`` does.

        An untrusted notebook shows no widgets; one the user saved, or trusted, does.
        """
        from nbformat.sign import NotebookNotary

        assert self.notary is not None, f"{self.name} has no notary of its own"
        db_file, secret_file = self.notary
        NotebookNotary(db_file=str(db_file), secret_file=str(secret_file)).sign(notebook)

    def note_kernels(self) -> None:
        """Remember the server's child processes (its kernels), to stop them by PID later."""
        self.kernels.update(process_tree(self.proc.pid))

    def stop(self) -> None:
        """Stop the server (SIGTERM, then SIGKILL) and any kernel it leaves behind, by PID."""
        self.note_kernels()
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        stop_pids(self.kernels)


# The kernels' IPython profile. By default ipykernel sends what the process writes to
# its file descriptor 2 to the front end, so a kernel that dies takes its last words
# (faulthandler's stacks, a fatal error) with it; here they stay in the server's log.
KERNEL_CONFIG = """\
c.IPKernelApp.capture_fd_output = False
"""

# Run at kernel start (a profile startup file; nothing left in the user's namespace):
# how the kernel's main loop ends, when it ends, and where a SIGINT found the main thread.
KERNEL_STARTUP = """\
def _test_harness():
    import asyncio, atexit, os, threading, traceback

    import ipykernel.kernelbase
    from tornado.platform.asyncio import BaseAsyncIOLoop

    def say(text):
        os.write(2, ("[test harness] " + text + "\\n").encode())

    atexit.register(say, "the kernel exits (not killed by a signal)")
    loop_start, loop_stop = BaseAsyncIOLoop.start, asyncio.BaseEventLoop.stop
    main = []

    def stop(self):
        if self in main:
            say("the kernel's main loop is stopped here:\\n" + "".join(traceback.format_stack()))
        loop_stop(self)

    def start(self):
        if threading.current_thread() is not threading.main_thread():
            return loop_start(self)
        main.append(self.asyncio_loop)
        try:
            loop_start(self)
        except BaseException:
            say("the kernel's main loop ended by an exception:\\n" + traceback.format_exc())
            raise
        say("the kernel's main loop was stopped")

    def on_sigint(signum, frame):
        say("SIGINT:\\n" + "".join(traceback.format_stack(frame)))
        raise KeyboardInterrupt

    BaseAsyncIOLoop.start = start
    asyncio.BaseEventLoop.stop = stop
    ipykernel.kernelbase.default_int_handler = on_sigint


_test_harness()
del _test_harness
"""


def _jupyter_env(extra: dict[str, str] | None, folder: Path) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("JUPYTER_TOKEN", None)
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONFAULTHANDLER"] = "1"  # a kernel that dies of a signal leaves its stack in the log
    profile = folder / "ipython" / "profile_default"
    profile.mkdir(parents=True, exist_ok=True)
    (profile / "ipython_kernel_config.py").write_text(KERNEL_CONFIG)
    (profile / "startup").mkdir(exist_ok=True)
    (profile / "startup" / "00-test-harness.py").write_text(KERNEL_STARTUP)
    env["IPYTHONDIR"] = str(profile.parent)
    env.update(extra or {})
    return env


def _start(name: str, argv: list[str], cwd: Path, log: Path, env: dict[str, str]) -> Any:
    with log.open("wb") as out:
        return subprocess.Popen(
            argv, cwd=cwd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env
        )


@contextlib.contextmanager
def jupyter_lab(root: Path, env: dict[str, str] | None = None) -> Iterator[Server]:
    """JupyterLab serving ``root`` on a random port with a random token; stopped on exit.

    The same server serves Notebook 7 (``/notebooks/PATH``) when ``notebook`` is
    installed. Its notebook signatures live beside ``root`` (see :meth:`Server.trust`).
    """
    port, token = free_port(), secrets.token_hex(16)
    log = root.parent / f"jupyter-lab-{port}.log"
    # Lab's own settings and workspaces in a fresh folder: no news pop-up, no update
    # check, and nothing read from or written to the user's ~/.jupyter
    user = root.parent / f"jupyter-lab-{port}"
    notification = user / "settings" / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        '{"fetchNews": "false", "checkForUpdates": false}'
    )
    env = {
        "JUPYTERLAB_SETTINGS_DIR": str(user / "settings"),
        "JUPYTERLAB_WORKSPACES_DIR": str(user / "workspaces"),
        **(env or {}),
    }
    argv = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--allow-root",
        "--no-browser",
        "--ip=127.0.0.1",
        f"--port={port}",
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--LabApp.news_url=None",
        "--ServerApp.port_retries=0",
        "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
        # server extensions this test has no use for (the language-server scan takes seconds)
        "--ServerApp.jpserver_extensions=jupyter_lsp=False",
        "--ServerApp.jpserver_extensions=jupyter_server_terminals=False",
        "--ServerApp.jpserver_extensions=voila.server_extension=False",
        f"--NotebookNotary.db_file={user / 'nbsignatures.db'}",
        f"--NotebookNotary.secret_file={user / 'notebook_secret'}",
    ]
    server = Server(
        "jupyter lab",
        _start("jupyter lab", argv, root, log, _jupyter_env(env, user)),
        port,
        token,
        log,
    )
    server.notary = (user / "nbsignatures.db", user / "notebook_secret")
    server.settings = user / "settings"
    server.root = root
    try:
        server.ready()
        yield server
    finally:
        server.stop()


@contextlib.contextmanager
def voila(
    notebook: Path, env: dict[str, str] | None = None, *, wait: bool = True
) -> Iterator[Server]:
    """Voilà rendering ``notebook`` on a random port; stopped on exit.

    With ``wait=False`` it yields as soon as the process is started: call
    ``server.ready()`` before using it (a test can start it early, beside others).
    """
    port = free_port()
    log = notebook.parent.parent / f"voila-{port}.log"
    argv = [
        sys.executable,
        "-m",
        "voila",
        str(notebook),
        "--no-browser",
        f"--port={port}",
        "--Voila.ip=127.0.0.1",
    ]
    proc = _start("voila", argv, notebook.parent, log, _jupyter_env(env, log.with_suffix("")))
    # Voilà answers /api/status with a redirect: any answer means it is up
    server = Server("voila", proc, port, "", log, any_answer=True)
    try:
        if wait:
            server.ready()
        yield server
    finally:
        server.stop()
