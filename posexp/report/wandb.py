"""A report logged to Weights & Biases: its figures and tidy table as one W&B run of job
type 'report'."""

from __future__ import annotations

from pathlib import Path

from posexp.report.base import Report
from posexp.report.tables import CSV_COLUMNS, tidy_rows
from posexp.runs import RunResult


def upload_to_wandb(files: list[Path], runs: list[RunResult], out: Path,
                    project: str | None) -> str | None:
    """Log the report's figures and tidy table as one W&B run of job type 'report'.  W&B's
    files go beside the report (``out/wandb``, or under WANDB_DIR), its messages stay off the
    terminal; returns the line that says where the run went (sinks.where_it_went)."""
    import shutil

    import wandb

    from posexp.sinks import wandb_dir, where_it_went

    rows = tidy_rows(Report.of(runs))
    with wandb.init(project=project, job_type="report", name="report",
                    dir=str(wandb_dir(out)), settings=wandb.Settings(silent=True)) as run:
        run.log({"summary": wandb.Table(columns=CSV_COLUMNS,
                                        data=[[r[c] for c in CSV_COLUMNS] for r in rows])})
        for f in files:
            if f.suffix == ".png":
                run.log({f.stem: wandb.Image(str(f))})
        for f in files:
            if f.suffix in (".md", ".csv"):
                # a copy inside the run's files: wandb.save of an outside file symlinks it
                # and warns on the terminal
                copy = Path(run.dir) / f.name
                shutil.copyfile(f, copy)
                run.save(str(copy), base_path=run.dir, policy="now")
        return where_it_went(run)
