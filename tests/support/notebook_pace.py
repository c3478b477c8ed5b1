"""The pace of a demo notebook's scripted model, quickened in a test's copy of it.

The notebooks pace their scripted model's words so a person can watch them arrive
(``stream_delay=0.12`` in the quickstart: ~17 s of streaming for a run and its
rerun). A test that checks what a run does, not its pace, sets a quicker one in its
copy; tests/notebook/test_notebooks.py checks the notebook's own pace.
"""

from __future__ import annotations

import re
from pathlib import Path


def set_stream_delay(notebook: Path, seconds: float) -> None:
    """Set the one ``stream_delay=`` in ``notebook`` (a copy) to ``seconds``."""
    text = notebook.read_text()
    paced, found = re.subn(r"stream_delay=[0-9.]+", f"stream_delay={seconds}", text)
    assert found == 1, f"{notebook.name} sets stream_delay {found} times, not once"
    notebook.write_text(paced)
