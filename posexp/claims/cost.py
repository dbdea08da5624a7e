"""What a suite cost, from its records: verdicts.md's section of the hours its recorded runs
trained and scored for, per training budget, summed from each run.json (``train_seconds``,
``eval_seconds``, ``last_eval_seconds`` of a later scoring).  A document that quotes a
suite's cost quotes this section (a ``<!-- numbers: DIR -->`` paragraph, checked by
posexp/claims/digest.py), never a figure typed from memory."""

from __future__ import annotations

from posexp.runs import RunResult


def _hours(runs: list[RunResult], *keys: str) -> float:
    return sum(float(r.info.get(k) or 0.0) for r in runs for k in keys) / 3600


def cost_line(name: str, runs: list[RunResult]) -> str:
    tokens = sum(int(r.info.get("tokens_trained") or 0) for r in runs)
    devices = ", ".join(sorted({str(r.info.get("device", "?")) for r in runs}))
    return (f"| {name or 'every run'} | {len(runs)} | {tokens / 1e6:,.0f}M | "
            f"{_hours(runs, 'train_seconds'):.2f} | "
            f"{_hours(runs, 'eval_seconds', 'last_eval_seconds'):.2f} | {devices} |")


def cost_note(budgets: list[tuple[str, list[RunResult]]]) -> str | None:
    """The cost section: one row per training budget (``budgets``: (its name, its runs));
    None when no run is recorded."""
    if not any(runs for _, runs in budgets):
        return None
    return "\n".join([
        "## What it cost", "",
        "Hours of each budget's recorded runs, summed from their run.json (training; scoring, "
        "with the latest later scoring of each run), on the cores they ran on and beside "
        "whatever else ran there: a campaign's wall time is longer.", "",
        "| budget | runs | tokens trained | training (h) | scoring (h) | device |",
        "|---|---:|---:|---:|---:|---|",
        *(cost_line(name, runs) for name, runs in budgets if runs)])
