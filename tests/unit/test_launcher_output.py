"""The launcher copies its children's lines whole, however many children write at once."""

from __future__ import annotations

import io
import re
import sys
import threading

from hogwild.cluster.localrun.launcher import Child, say


class _SlowWrites(io.StringIO):
    """A terminal that yields between the pieces of one print(): what made lines run together."""

    def write(self, text: str) -> int:
        written = super().write(text)
        threading.Event().wait(0.0001)  # let another thread in between two writes
        return written


def test_lines_of_children_writing_at_once_are_never_joined() -> None:
    out = _SlowWrites()
    script = "import sys\nfor i in range(300):\n    print(f'line {i} ' + 'x' * 60)\n"
    children = [Child(f"child{k}", [sys.executable, "-c", script], out) for k in range(3)]
    for child in children:
        assert child.wait(60.0) == 0
        child.finish_output()
    lines = out.getvalue().splitlines()
    assert len(lines) == 900
    pattern = re.compile(r"^\[child[0-2]\] line \d+ x{60}$")
    assert [line for line in lines if not pattern.match(line)] == []
    for k in range(3):
        numbers = [int(line.split()[2]) for line in lines if line.startswith(f"[child{k}]")]
        assert numbers == list(range(300))  # each child's lines in its own order


def test_say_writes_one_line() -> None:
    out = io.StringIO()
    say(out, "[run] hello")
    say(out, "[run] again")
    assert out.getvalue() == "[run] hello\n[run] again\n"
