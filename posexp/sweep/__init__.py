"""Sweeps: encodings x training lengths x seeds through Hydra's multirun.

Hydra's sweeper expands the grid and its launcher plugins run the jobs (sequential, joblib,
submitit).  posexp adds three things around them: every job of the grid is composed and
checked before the first one starts (plan.py); each job is a run (run/lifecycle.py), which
skips a run directory that already holds a completed run of the same identity and resumes an
unfinished one, so a sweep run again finishes only what is missing; and a failed job is
recorded and reported without stopping the others (launch.py).  Jobs that run at once keep
their lines whole (lines.py), and a signal stops every job at once (stop.py).
"""
