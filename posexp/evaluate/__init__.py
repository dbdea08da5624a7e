"""Scoring a trained model: windows.py scores the validation spans with windows of every
length (the extrapolation curve, per-position loss); tasks.py scores a task's held-out
instances at each length (exact match, token accuracy).  Both take a model that returns
token losses and know nothing of runs: run/ and pretrained/ call them."""
