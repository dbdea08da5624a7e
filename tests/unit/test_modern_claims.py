"""The claim sets of today's baselines (claims/modern.py): each claim reads the curves and
the lengths its margins file fixes -- Self-Extend at the group size fixed there, its
comparators at the extension factor, SSMax as a variant of RoPE -- and CoPE's claims the
tasks, gate and gain fixed there."""

from posexp import scaling
from posexp.claims.preset import load_preset
from posexp.claims.registry import numbered

L = 128


def claims(name):
    preset, claim_set = load_preset(name)
    return preset, dict(numbered(claim_set.sections(preset)))


def test_each_lm_claim_reads_the_curves_its_margins_fix():
    preset, by_number = claims("modern")
    th = preset.thresholds
    assert len(by_number) == 7
    extend = by_number[6]
    methods = {dict(c.scaling)["method"]: dict(c.scaling) for c in extend.needs if c.scaling}
    assert methods["self_extend"]["factor"] == float(th.self_extend.group) == 6.0
    assert methods["self_extend"]["neighbor_window"] == float(th.self_extend.neighbor_window)
    assert methods["ntk"]["factor"] == methods["yarn"]["factor"] == float(th.extension_factor)
    assert [t.kind.high for t in extend.tests] == [
        1 + float(th.self_extend.margin), *[1 / (1 + float(th.better.margin))] * 3]
    temperature = next(c for c in by_number[7].needs if c.scaling)
    assert scaling.METHODS[dict(temperature.scaling)["method"]].kind == scaling.TEMPERATURE
    assert [c.variant for c in by_number[5].needs] == [(("model.ssmax", True),), ()]
    assert not by_number[4].gated and all(by_number[n].gated for n in (1, 2, 3, 5, 6, 7))
    # "past L" and "far past L" are the margins file's lengths
    assert f"ppl({int(th.far_at)}L)" in by_number[1].tests[0].label
    assert f"ppl({int(th.past_at)}L)" in by_number[1].tests[1].label


def test_copes_claims_read_the_tasks_gate_and_gain_fixed_with_the_rest():
    preset, by_number = claims("modern-tasks")
    th = preset.thresholds
    assert [c.needs[0][0] for c in by_number.values()] == list(th.cope_tasks)
    for claim in by_number.values():
        assert [(t.a[1], t.b[1]) for t in claim.tests] == [("cope", "rope"), ("cope", "nope")]
        assert all(t.kind.low == float(th.cope_gain.margin) for t in claim.tests)


def test_a_suites_report_shows_a_shared_run_as_that_suite_scores_it(tmp_path):
    """A run another suite scored with RoPE scalings keeps, in this suite's report, the
    points as trained and those with the scalings this suite asks for."""
    from posexp.claims.suite import as_asked
    from posexp.runs import RunResult

    ntk = scaling.record("ntk", 4.0, {p.name: p.default for p in scaling.all_params()})
    yarn = scaling.record("yarn", 4.0, {p.name: p.default for p in scaling.all_params()})
    points = [{"length": 128, "rope_scaling": None}, {"length": 512, "rope_scaling": ntk},
              {"length": 512, "rope_scaling": yarn}]
    run = RunResult(tmp_path, {"status": "completed"}, curve=points)
    assert as_asked(run, {None}).curve == points[:1]
    assert as_asked(run, {None, scaling.key(yarn)}).curve == [points[0], points[2]]
    assert as_asked(run, None).curve == points  # a fine-tune: every point
