"""The launcher copies its children's lines whole, however many children write at once."""

from __future__ import annotations

import io
import re
import sys
import threading

from hogwild.cluster.localrun.launcher import Child, say, shared_cores


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


def test_a_run_whose_threads_outnumber_the_cores_says_so() -> None:
    assert shared_cores(2, 1, cores=2) is None and shared_cores(4, 4, cores=16) is None
    line = shared_cores(8, 1, cores=2)
    assert line is not None and line.startswith(
        "[run] 8 worker(s) x 1 thread(s) on this machine's 2 core(s):")
    assert "`hogwild simulate --workers 8`" in line
    assert shared_cores(2, 2, cores=3) is not None
