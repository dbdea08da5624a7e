"""Run directories written without training: the files posexp train leaves, with a curve
whose every number is known, for tests of what reads runs back (ls, compare, report)."""

import json
import math
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from posexp import config as C
from posexp import stats
from posexp.spans import Spans, layout
from tests.conftest import TINY
from tests.conftest import compose_args as compose

FINGERPRINT = "7f3e3fa2ed09" + "0" * 52
VAL_TOKENS, DOCUMENTS = 100_000, 16  # the validation split of every run written here
LAYOUTS: dict[str, dict] = {}  # id -> record of every layout a point here names


def as_trained(records: list[dict], random_positions: int | None) -> list[dict]:
    """``records`` (points, per-position records) as posexp writes them for a run: a
    randomized run's say they were scored at sampled positions (evaluate/positions.py),
    unless they say otherwise."""
    if random_positions is not None:
        for p in records:
            if p.setdefault("positions", "sampled") == "sampled":
                p.setdefault("positions_seed", 0)
    return records


def spans_of(n_tokens: int, val_tokens: int = VAL_TOKENS) -> Spans:
    """The spans of ``n_tokens`` targets over a split of DOCUMENTS equal documents."""
    spans = layout(val_tokens, np.arange(0, val_tokens, val_tokens // DOCUMENTS), n_tokens)
    LAYOUTS[spans.id] = spans.record()
    return spans


def curve_point(mode: str, length: int, losses: np.ndarray, first: int | None = None,
                stride: int | None = None, spans: Spans | None = None) -> dict:
    """A scored point of the target ``losses`` (nats, one per scored token) with the sums of
    each document and its bootstrap interval, as evaluate.extrapolation_curve writes it: on
    the spans of len(losses) targets (or ``spans``), or with ``first`` on one stretch with 64
    blocks, as posexp scored before it spread its spans."""
    loss = float(losses.mean())
    p = {"mode": mode, "length": length, "stride": stride or length, "tokens": len(losses),
         "applicable": True, "reason": None, "loss": loss,
         "ppl": math.exp(loss), "bits_per_token": loss / math.log(2),
         "bits_per_byte": loss / math.log(2), "seconds": 0.1}
    if first is not None:
        p["first_token"] = first
        p["block_loss"], p["block_tokens"] = stats.block_sums(losses)
    else:
        spans = spans or spans_of(len(losses))
        p.update(spans=spans.id, documents=spans.documents)
        p["block_loss"], p["block_tokens"] = stats.cluster_sums(losses, spans)
    p["ppl_low"], p["ppl_high"] = stats.ppl_interval(p)
    return p


def not_applicable(length: int, tokens: int) -> dict:
    spans = spans_of(tokens)
    return {"mode": "nonoverlapping", "length": length, "stride": length, "spans": spans.id,
            "tokens": tokens, "applicable": False, "loss": None, "ppl": None,
            "reason": f"learned positions stop at 16; there is no position 16 or beyond to "
                      f"evaluate {length} tokens"}


def eval_file(curve: list[dict], per_position: list[dict] = ()) -> str:
    """eval.json of ``curve``, with the layouts its points name."""
    names = {p["spans"] for p in (*curve, *per_position) if p.get("spans")}
    return json.dumps({"curve": curve, "per_position": list(per_position),
                       "spans": {n: LAYOUTS[n] for n in names}})


def write_run(path: Path, overrides: list[str], curve: list[dict], status: str = "completed",
              reason: str | None = None, corpus: str = FINGERPRINT) -> Path:
    """config.yaml, run.json and (for a completed run) eval.json of a run of TINY with
    ``overrides``."""
    C.register()
    cfg = C.resolve(compose([*TINY, *overrides]))
    path.mkdir(parents=True)
    (path / "config.yaml").write_text(OmegaConf.to_yaml(cfg, resolve=True))
    info = {"status": status, "reason": reason, "name": path.name,
            "experiment": path.parent.name, "encoding": cfg.encoding.name,
            "seq_len": cfg.train.seq_len, "seed": cfg.seed,
            "model": {k: cfg.model[k] for k in ("d_model", "n_layer", "n_head")},
            "corpus": {"name": "stdlib", "fingerprint": corpus, "tokenizer": "byte",
                       "tokenizer_fingerprint": "1c31626f568a" + "0" * 52,
                       "vocab_size": 256, "val_tokens": VAL_TOKENS}}
    (path / "run.json").write_text(json.dumps(info))
    if status == "completed":
        (path / "eval.json").write_text(eval_file(as_trained(curve,
                                                             cfg.train.random_positions)))
    return path


def losses(level: float, n: int = 512, seed: int = 0) -> np.ndarray:
    """Per-token losses around ``level`` nats, fixed by ``seed``."""
    return level + 0.5 * np.random.default_rng(seed).standard_normal(n)


def six_runs(tmp_path: Path) -> tuple[Path, list[dict]]:
    """Six runs of one experiment, one of each status ls tells apart."""
    root = tmp_path / "out"
    exp = root / "exp"
    curve = [curve_point("nonoverlapping", L, losses(1.5 + L / 100, seed=L)) for L in (16, 32, 64)]
    write_run(exp / "alibi-L16-s0", ["encoding=alibi"], curve)
    write_run(exp / "learned-L16-s0", ["encoding=learned"],
              [curve[0], not_applicable(32, 512), not_applicable(64, 512)])
    write_run(exp / "rope-L16-s1", ["encoding=rope", "seed=1"], [], status="running")
    write_run(exp / "nope-L16-s0", ["encoding=nope"], [], status="failed",
              reason="RuntimeError: CUDA out of memory. Tried to allocate 20.00 GiB; "
                     "GPU 0 has a total capacity of 79.10 GiB of which 3.2 GiB is free")
    write_run(exp / "sinusoidal-L16-s0", ["encoding=sinusoidal"], curve)
    (exp / "sinusoidal-L16-s0" / "eval.json").write_text('{"curve": [')
    write_run(exp / "rope-L16-s0", ["encoding=rope"], [], status="diverged",
              reason="training diverged: loss became nan at step 5 (last finite loss: 4.1)")
    return root, curve
