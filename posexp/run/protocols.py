"""What a workload is, as the code that drives one reads it -- two protocols, no classes:

* ``Scored``: what is scored and how eval.json holds it -- the points a run asks for and
  lacks, their keys, the table printed at the end (run/evaluation.py reads only these).  A
  corpus run, a task run (run/workloads.py) and a pretrained model (pretrained/scoring.py)
  are scored alike.
* ``Workload``: a ``Scored`` that also trains -- its data, a training batch, the validation
  loss (run/training.py's ``Loop`` and ``fit``), and scoring a model it trained.

A new kind of workload implements one and is typed with it; tests/unit/test_protocols.py
holds each implementation to its protocol.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import torch

    from posexp.model import GPT
    from posexp.runs import Run
    from posexp.sinks import Sink

Want = tuple  # (scaling record or None, item)
Wanted = list[tuple[dict | None, list]]  # the items of each scaling, in order
Held = list[tuple[dict, Wanted]]  # points to score again: config overrides, their wants


@runtime_checkable
class Scored(Protocol):
    what: str  # what one point is called in messages: "point", "task point"

    def requested(self, scalings: Iterable[dict | None],
                  scored: dict | None = None) -> dict[tuple, Want]:
        """eval.json key -> want of each point asked for with each scaling."""

    def every(self, scalings: Iterable[dict | None]) -> Wanted:
        """Every point asked for, by scaling: what a run scores when it holds none."""

    @staticmethod
    def points(data: dict) -> list[dict]:
        """The points of this workload's kind in an eval.json."""

    @staticmethod
    def key(p: dict) -> tuple:
        """A point's eval.json key."""

    def item_text(self, item: Any) -> str:
        """An item of Wanted (a length, or a length and depth) in words: always called on a
        workload, whose settings may name it (a pretrained run's task)."""

    def table(self, points: list[dict], corpus_tokenizer: str | None) -> str:
        """The table printed at the end of scoring."""

    def held(self, points: list[dict]) -> tuple[Held, list[dict]]:
        """Points of eval.json (of another code) as this code scores them again: the
        overrides of the run's config that score each group, with its wants; and the points
        it cannot score again."""


@runtime_checkable
class Workload(Scored, Protocol):
    def load(self) -> Any:
        """The data it trains and scores on (a corpus, a task's instances)."""

    def check(self, data: Any) -> None:
        """Refuse data the run cannot use, in one line."""

    def describe(self, data: Any) -> str:
        """The data in the words of the run's first line."""

    def batch(self, data: Any, step: int, gen: torch.Generator, rows: slice,
              device: torch.device, fixed_width: bool) -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and targets of training step ``step``, the rows of this process."""

    def val_loss(self, model: GPT, data: Any, device: torch.device) -> float:
        """The validation loss (nats per target) of ``model`` now."""

    def score(self, model: GPT, data: Any, run: Run, sink: Sink, device: torch.device,
              wanted: Wanted, progress: bool = True) -> list[dict]:
        """Score the points of ``wanted``, each written to eval.json as it is done."""
