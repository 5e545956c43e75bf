"""Who may see a transcript's images: the images no worker has answered yet (they mask, for that step, the
workers that cannot see images), and the transcript as a worker that cannot see them is sent it (each image
replaced by its note), so an image part never reaches a text-only worker. Never prints.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Collection, Sequence

from fugu_cli.types import Image, Message, Worker, image_note

Sees = Callable[[Worker], bool]


def declared(worker: Worker) -> bool:
    """Whether the pool says `worker` sees images (without litellm's table: a scripted run's answer)."""
    return bool(worker.vision)


def fresh(messages: Sequence[Message]) -> list[Image]:
    """The images after the last assistant message: what the next step's worker is asked to look at."""
    out: list[Image] = []
    for m in reversed(messages):
        if m.role == "assistant":
            break
        out[:0] = m.images
    return out


def blind(workers: Sequence[Worker], sees: Sees, skip: Collection[str] = ()) -> dict[str, str]:
    """{worker: why} for the workers (not in `skip`) that cannot see images."""
    return {w.name: f"{w.name} cannot see images" for w in workers if w.name not in skip and not sees(w)}


def nobody_sees(workers: Sequence[Worker]) -> str:
    """The error of a step with images and no worker that can see them."""
    names = ", ".join(w.name for w in workers)
    return (
        f"the task has an image, and no worker in the pool can see images ({names}). Add a worker whose "
        "model accepts images, or set `vision = true` on one in the pool that does"
    )


class TextOnly:
    """The transcript as a worker that cannot see images receives it: the same Message objects, except those
    with images, each replaced (once, so a transcript's wire form stays cached) by a copy whose images are
    only noted."""

    def __init__(self) -> None:
        self._copies: dict[int, tuple[Message, Message]] = {}

    def __call__(self, messages: Sequence[Message]) -> list[Message]:
        return [self._copy(m) if m.images else m for m in messages]

    def _copy(self, message: Message) -> Message:
        found = self._copies.get(id(message))
        if found is None or found[0] is not message:
            note = f"{image_note(message.images)} (not shown: this worker cannot see images)"
            text = f"{message.content}\n{note}" if message.content else note
            found = (message, dataclasses.replace(message, content=text, images=()))
            self._copies[id(message)] = found
        return found[1]
