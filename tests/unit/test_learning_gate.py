"""The learning gate of the language-model claims (claims/gate.py, #43): a claim about
behaviour past L carries no verdict on an arm whose bits per byte at L, at its weakest seed,
is not below the margins file's compressor bar; a claim about quality at L is judged on every
arm; verdicts.md's gate table prints the bar and every arm's value."""

import json
import math

import pytest
from omegaconf import OmegaConf

from posexp.claims import verdicts
from posexp.claims.base import FAILS, HOLDS, UNMEASURED
from posexp.claims.gate import gate_note
from posexp.runs import load_runs
from tests.unit.test_reproduce import EXPECTED, PRESET, REGION, by_number, claim_runs

BAR = {"compressor": "zlib", "reason": "worse than zlib is not learned"}
ZLIB = math.log2(6.0)  # the bar: an arm at ppl(L) 6 or more did not learn


def with_bytes(root, zlib: float = ZLIB) -> list:
    """The runs under ``root`` as byte-level runs: each point's bits per byte log2(ppl), and
    what zlib and xz make of the scored text recorded with its spans."""
    for path in root.glob("*/eval.json"):
        data = json.loads(path.read_text())
        for p in data["curve"]:
            p["bits_per_byte"] = math.log2(p["ppl"]) if p["ppl"] else None
        data["spans"][REGION.id]["compression"] = {"zlib": zlib, "xz": zlib - 0.3}
        path.write_text(json.dumps(data))
    return load_runs(root)[0]


def gated() -> OmegaConf:
    return OmegaConf.merge(PRESET, {"thresholds": {"learned_bar": BAR}})


def test_a_claim_past_l_is_not_judged_on_an_arm_that_did_not_learn(tmp_path):
    # NoPE (ppl(L) 7) and sinusoidal trained at 2L (ppl(L) 8) are above the bar of 6
    claim_runs(tmp_path)
    runs = with_bytes(tmp_path)
    v = by_number(verdicts(runs, gated(), 512))
    for n in (4, 7):  # ALiBi vs sinusoidal trained at 2L; NoPE vs sinusoidal past L
        assert v[n].verdict == UNMEASURED
        assert v[n].measured.startswith("not measured: did not learn: ")
    assert f"not below zlib -9's {ZLIB:.3f}" in v[7].measured and "nope" in v[7].measured
    assert "nope" not in v[4].measured and "sinusoidal" in v[4].measured
    # a claim about quality at L is judged on every arm: NoPE's answer is the measurement
    assert v[6].verdict == FAILS == EXPECTED[6]
    assert {n: v[n].verdict for n in (1, 2, 3, 5)} == {n: EXPECTED[n] for n in (1, 2, 3, 5)}
    # without the bar every claim is judged as before
    plain = by_number(verdicts(runs, PRESET, 512))
    assert {n: plain[n].verdict for n in plain} == EXPECTED


def test_the_weakest_seed_decides(tmp_path):
    """RoPE learned at seed 0 (ppl(L) 4) but not at seed 1 (6.5): its claims are gated."""
    claim_runs(tmp_path, seeds=(0, 1))
    for path in tmp_path.glob("rope-L16-s1/eval.json"):
        data = json.loads(path.read_text())
        for p in data["curve"]:
            p["ppl"] = p["ppl"] * 6.5 / 4.0
        path.write_text(json.dumps(data))
    runs = with_bytes(tmp_path)
    v = by_number(verdicts(runs, gated(), 512))
    assert v[2].verdict == UNMEASURED  # RoPE between ALiBi and sinusoidal
    assert "(seed 1)" in v[2].measured and "rope" in v[2].measured
    assert v[1].verdict == HOLDS  # sinusoidal's claim reads no RoPE


def test_a_bar_not_recorded_for_the_text_leaves_the_claim_unmeasured(tmp_path):
    claim_runs(tmp_path)
    runs = load_runs(tmp_path)[0]  # no compression recorded (not byte-level text)
    v = by_number(verdicts(runs, gated(), 512))
    assert v[1].verdict == UNMEASURED
    assert "the gate's bar (zlib -9) is not recorded for its text" in v[1].measured
    assert v[6].verdict == FAILS  # at L: not gated


def test_verdicts_md_prints_the_bar_and_every_arms_value(tmp_path):
    claim_runs(tmp_path)
    note = gate_note([("", with_bytes(tmp_path))], gated())
    rows = {line.split(" | ")[0].strip("| "): line for line in note.splitlines()
            if line.startswith("| ") and "bits per byte" not in line}
    nope = next(line for name, line in rows.items() if name.startswith("nope"))
    assert f"0: {math.log2(7.0):.3f}" in nope and f"| {ZLIB:.3f} | **no** |" in nope
    rope = next(line for name, line in rows.items() if name.startswith("rope"))
    assert rope.endswith("| yes |")
    assert "worse than zlib is not learned" in note
    assert gate_note([("", [])], PRESET) is None  # no bar, no section
    # one table a budget, named, the main one first; a budget with no runs says so
    by_budget = gate_note([("At 16M tokens (the main budget)", []),
                           ("At 4M tokens", with_bytes(tmp_path))], gated())
    assert "At 16M tokens (the main budget):\n\nNo arm of this budget is recorded yet." in by_budget
    assert by_budget.index("At 4M tokens:") < by_budget.index("| nope L=16 |")


@pytest.mark.parametrize("bar, refusal", [
    ({"compressor": "gzip", "reason": "r"}, "learned_bar must be a mapping of compressor"),
    ({"compressor": "zlib"}, "learned_bar must be a mapping of compressor"),
    ({"compressor": "xz", "reason": " "}, "learned_bar must be a mapping of compressor")])
def test_a_bad_bar_is_refused(tmp_path, bar, refusal):
    import yaml

    from posexp.claims.preset import load_preset
    from posexp.errors import UsageError
    from tests.presets import shipped_preset

    tree = shipped_preset("cpu")
    assert tree["thresholds"]["learned_bar"]["compressor"] == "zlib"  # as shipped
    tree["thresholds"]["learned_bar"] = bar
    (tmp_path / "p.yaml").write_text(yaml.safe_dump(tree))
    with pytest.raises(UsageError, match=refusal):
        load_preset(str(tmp_path / "p.yaml"))
