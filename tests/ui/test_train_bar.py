"""`fugu router train`'s progress bar: the share done, the time elapsed and the phase's time left at its pace
so far, redrawn in place on a terminal and a line per tenth elsewhere."""

from __future__ import annotations

from fugu_cli.ui.train_bar import TrainBar, clock


class Clock:
    def __init__(self) -> None:
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


def test_time_left_follows_the_pace_of_the_phase_so_far() -> None:
    now, out = Clock(), []
    bar = TrainBar(tty=False, write=lambda text, end: out.append(text + end), now=now)
    now.t = 130.0  # encoding took 30 s
    bar.update("encoding prompts", 100, 100)
    now.t = 150.0  # the next phase began when the last one ended: 20 s for 1 of 4
    bar.update("stage 2 generation", 1, 4, "best 0.5")
    line = "[█████               ] stage 2 generation 1/4 · best 0.5 · 50s elapsed · about 1m00s left"
    assert out[-1] == line + " in this phase\n"
    now.t = 160.0
    bar.update("stage 2 generation", 2, 4)
    assert "about 30s left" in out[-1]
    bar.update("stage 2 generation", 4, 4)
    assert out[-1].endswith("· done\n") and len(out) == 4


def test_on_a_terminal_the_line_is_redrawn_and_ended_before_anything_else() -> None:
    now, out = Clock(), []
    bar = TrainBar(tty=True, write=lambda text, end: out.append(text + end), now=now)
    bar.update("choosing α, τ", 0, 12)
    assert out[-1].startswith("\r[") and "time left: measuring" in out[-1] and not out[-1].endswith("\n")
    bar.end()
    assert out[-1] == "\n"
    bar.end()
    assert len(out) == 2  # nothing to end twice


def test_clock() -> None:
    assert [clock(s) for s in (0.4, 59, 61, 3599, 3660)] == ["0s", "59s", "1m01s", "59m59s", "1h01m"]
