"""posexp: which positional encoding keeps working past the length it was trained on?"""

__version__ = "0.1.0"
