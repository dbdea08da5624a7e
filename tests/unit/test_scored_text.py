"""verdicts.md says what its claims were scored on (claims/scored.py): tokens, documents and
effective documents of the layout, the compressors' bits per byte, the share of targets a
span's last window scored at each length, and, when every model compresses worse than xz,
that these are early-training models."""

import json
import math

import numpy as np

from posexp.claims.scored import scored_text
from posexp.runs import load_runs
from tests.runs_on_disk import curve_point, losses, spans_of, write_run


def test_the_scored_text_is_described_beside_the_verdicts(tmp_path):
    spans = spans_of(512)
    curve = []
    for length, remainder in ((16, 20), (32, 40), (64, 512)):
        p = curve_point("nonoverlapping", length, losses(1.2, seed=length), spans=spans)
        curve.append({**p, "remainder": remainder, "mean_context": length / 2})
    path = write_run(tmp_path / "exp" / "rope-L16-s0", [], curve)
    eval_json = json.loads((path / "eval.json").read_text())
    eval_json["spans"][spans.id]["compression"] = {"zlib": 2.5, "xz": 1.0}
    (path / "eval.json").write_text(json.dumps(eval_json))
    run = load_runs(tmp_path)[0][0]
    text = scored_text([run])
    effective = eval_json["spans"][spans.id]["effective_documents"]
    assert text.startswith(f"Scored text (layout {spans.id}): 512 validation targets in spans "
                           f"over {spans.documents} documents of the split's 16 with text, "
                           f"{effective:.1f} effective "
                           "documents. zlib -9 compresses it to 2.500 bits per byte and xz "
                           "-9e to 1.000.")
    assert text.endswith("nonoverlapping: 16: 3.9%, 32: 7.8%, 64: 100.0%.")
    best = curve[0]["loss"] / math.log(2)  # 1.2 nats a byte is 1.7 bits: worse than xz
    assert f"worse than xz at its training length (best {best:.3f} bits per byte): these " \
           "are early-training models" in text
    # a model better than xz: no such sentence
    eval_json["spans"][spans.id]["compression"] = {"zlib": 2.5, "xz": 1.9}
    (path / "eval.json").write_text(json.dumps(eval_json))
    assert "early-training" not in scored_text(load_runs(tmp_path)[0])
    assert np.isclose(effective, spans.effective_documents, atol=1e-3)


def test_runs_without_spread_points_say_so():
    assert scored_text([]) == ("Scored text: no point was scored on spans over the "
                               "validation split.")
