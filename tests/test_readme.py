"""The README is the front door: its quick-start snippet runs as written against ``serve --offline``.

The Python block after ``memproxy serve --offline`` is taken from README.md itself, its URL pointed at
the test's server, run up to "a moment later", then (once the memory it announces is stored) run to
the end; the last call's answer must be what the block's final comment says. The README also keeps
its promises of shape: the two set-up commands on the first screen, at most 250 lines, a table of
contents, and no line over 200 characters in it or in docs/.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.commands.test_offline import LISTENING, _config, _keyless_env
from tests.support.memory_flow import wait_until
from tests.support.serve_process import ServeProcess

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text(encoding="utf-8")


def quick_start_snippet() -> str:
    after = README.split("memproxy serve --offline\n```", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_the_front_door_keeps_its_shape() -> None:
    lines = README.splitlines()
    assert len(lines) <= 250
    first_screen = "\n".join(lines[:40])
    assert "pip install -e '.[dev]'" in first_screen and "python -m pytest -q" in first_screen
    assert "memproxy serve" in first_screen and "**Contents:**" in first_screen
    for page in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        long = [
            n for n, line in enumerate(page.read_text(encoding="utf-8").splitlines(), 1) if len(line) > 200
        ]
        assert long == [], (page.name, long)
    for link in re.findall(r"\]\((docs/[^)#]+)", README):
        assert (ROOT / link).is_file(), link


@pytest.mark.slow
def test_the_quick_start_snippet_runs_as_written(tmp_path: Path) -> None:
    snippet = quick_start_snippet()
    lines = snippet.splitlines()
    pause = next(n for n, line in enumerate(lines) if line.startswith("# a moment later"))
    before, after = "\n".join(lines[:pause]), "\n".join(lines[pause + 1 :])
    expected = re.search(r'# -> "(.*)"', after)
    assert expected, "the snippet ends with the answer it expects"
    last_call = [line for line in after.splitlines() if line.startswith("client.")][-1]
    with ServeProcess("serve", _config(tmp_path), tmp_path / "serve.log", args=["--offline"],
                      env=_keyless_env()) as server:  # fmt: skip
        url = wait_until(lambda: LISTENING.search(server.log_text()), timeout=60).group(1)
        scope: dict[str, Any] = {}
        exec(before.replace("http://127.0.0.1:8080", url), scope)

        def stored() -> list[str]:
            response = httpx.get(url + "/v1/memories", params={"user_id": "ana"},
                                 headers={"Authorization": "Bearer anything"}, timeout=10)  # fmt: skip
            return [m["text"] for m in response.json()["data"]]

        assert "User lives in Lisbon" in wait_until(lambda: stored() or None, timeout=60)
        exec(after.replace(last_call, "reply = " + last_call), scope)
        assert scope["reply"].choices[0].message.content == expected.group(1)
        assert server.stop() == 0
