"""The report's tables and figures drawn straight from runs (posexp.report builds a Report
once and draws everything from it; these build one per call, for tests of one piece)."""

from posexp.report import Report
from posexp.report import tables as _tables
from posexp.report import write_tables as _write_tables
from posexp.report.figures import extrapolation_figure as _extrapolation
from posexp.report.figures import per_position_figure as _per_position


def markdown(runs, not_done, title):
    return _tables.markdown(Report.of(runs, not_done), title)


def terminal_table(runs, mode="nonoverlapping"):
    return _tables.terminal_table(Report.of(runs), mode)


def tidy_rows(runs):
    return _tables.tidy_rows(Report.of(runs))


def write_tables(runs, not_done, out, title):
    return _write_tables(Report.of(runs, not_done), out, title)


def extrapolation_figure(runs, mode):
    return _extrapolation(Report.of(runs).series, mode)


def per_position_figure(runs):
    return _per_position(Report.of(runs).series)
