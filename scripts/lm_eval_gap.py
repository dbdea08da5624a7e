"""posexp's perplexity beside lm-evaluation-harness's for one model and one text: posexp
pretrained in its default modes (nonoverlapping, sliding) and in eval.mode=lm_eval, and
lm-eval 0.4.13's HFLM.loglikelihood_rolling on the documents lm_eval mode scored, with
add_bos_token=False and unset -- the numbers docs/pretrained.md's table of protocol
differences predicts the signs of.

    python scripts/lm_eval_gap.py MODEL_DIR TEXT_DIR [--lengths 128 1024] [--tokens 65536]
    python scripts/lm_eval_gap.py            # the tests' tiny Llama and word corpus, built here

Needs the hf and lmeval extras (both in the dev extras).  Token perplexity is per token of
the text each protocol scores; word perplexity and bits per byte use lm-eval's denominators
(Task.count_words, count_bytes) over the same documents.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def posexp_points(model: Path, text: Path, lengths: list[int], tokens: int, out: Path,
                  mode: str) -> list[dict]:
    from posexp.pretrained.lifecycle import pretrained

    args = ["data=text", f"data.val_path={text}", f"data.train_path={text}",
            f"eval.tokens={tokens}", f"eval.mode={mode}",
            f"eval.lengths=[{','.join(map(str, lengths))}]", f"results_dir={out}", "device=cpu",
            f"run_name={mode}"]
    pretrained(str(model), None, args, progress=False)
    return json.loads((out / "default" / mode / "eval.json").read_text())["curve"]


def lm_eval_row(model: Path, documents: list[str], length: int, add_bos: bool | None) -> dict:
    from lm_eval.api.instance import Instance
    from lm_eval.api.task import Task
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(model), backend="causal", device="cpu", dtype="float32",
              batch_size=1, max_length=length, add_bos_token=add_bos)
    lls = lm.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (d,), i)
                                    for i, d in enumerate(documents)], disable_tqdm=True)
    loss = -sum(lls)
    n_tokens = sum(len(lm.tok_encode(d)) for d in documents)
    words = sum(Task.count_words(d) for d in documents)
    n_bytes = sum(Task.count_bytes(d) for d in documents)
    return {"ppl": math.exp(loss / n_tokens), "word_ppl": math.exp(loss / words),
            "bpb": loss / n_bytes / math.log(2), "tokens": n_tokens}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("model", nargs="?", type=Path)
    parser.add_argument("text", nargs="?", type=Path)
    parser.add_argument("--lengths", type=int, nargs="+", default=[128, 1024])
    parser.add_argument("--tokens", type=int, default=8192)
    a = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="lm-eval-gap-"))
    if a.model is None:
        sys.path.insert(0, str(ROOT))
        from tests import pretrained_models as tiny

        a.model, a.text = tiny.llama(work / "tiny-llama"), tiny.corpus(work / "text", 60)
    from posexp.data import open_source
    from posexp.pretrained.lifecycle import build

    rows = {m: posexp_points(a.model, a.text, a.lengths, a.tokens, work, m)
            for m in ("nonoverlapping", "sliding", "lm_eval")}
    cfg = build(str(a.model), None, ["data=text", f"data.val_path={a.text}",
                                      f"data.train_path={a.text}"])[0]
    texts = [b"".join(d).decode() for d in open_source(cfg.data).splits["val"]()]
    layouts = json.loads((work / "default" / "lm_eval" / "eval.json").read_text())["spans"]
    print(f"{a.model.name} on {a.text}: token ppl | word ppl | bits/byte")
    print("| L | posexp nonoverlapping | posexp sliding | posexp lm_eval | lm-eval, "
          "add_bos_token=False | lm-eval, add_bos_token unset |")
    print("|---|---|---|---|---|---|")
    for L in a.lengths:
        cells = [f"{p['ppl']:.4f}" for m in ("nonoverlapping", "sliding")
                 for p in rows[m] if p["length"] == L]
        ours = next(p for p in rows["lm_eval"] if p["length"] == L)
        cells.append(f"{ours['ppl']:.4f} / {ours['word_perplexity']:.4g} / "
                     f"{ours['bits_per_byte']:.4f}")
        chosen = [texts[d] for d in layouts[ours["spans"]]["document"]]
        for add_bos in (False, None):
            r = lm_eval_row(a.model, chosen, L, add_bos)
            cells.append(f"{r['ppl']:.4f} / {r['word_ppl']:.4g} / {r['bpb']:.4f}")
        print(f"| {L} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
